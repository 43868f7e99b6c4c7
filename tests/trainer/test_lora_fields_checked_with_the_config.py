"""LoRA's pure-config mistakes (a rank below 0, an alpha that is no positive number or scales
the adapter past MAX_LORA_SCALE, an empty target list) are refused where the config is
checked: `mfsdp config check` and train before it loads torch both refuse them with the line
the model build gives (`check_lora_fields`, one function), exit 2. With rank 0 (LoRA off) an
alpha or target list no adapter reads is accepted, as verl reads lora_alpha only when
lora_rank > 0.

Was: `config check` said valid (exit 0) for lora_rank=-2, lora_alpha -1 / 0 / 1e300 and
target_modules=[], which train refused only at model build, after torch loaded; and train
refused lora_alpha=-1 beside lora_rank=0."""

from __future__ import annotations

import pytest

from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp, modules_after
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError, ModelConfig, SFTConfig, check_lora_fields, load_config

BAD = [
    (["model.lora_rank=-2"], "model.lora_rank must be >= 0 (0 turns LoRA off), got -2"),
    (["model.lora_rank=8", "model.lora_alpha=-1"], "model.lora_alpha must be > 0, got -1.0"),
    (["model.lora_rank=8", "model.lora_alpha=0"], "model.lora_alpha must be > 0, got 0.0"),
    (
        ["model.lora_rank=8", "model.lora_alpha=1e300"],
        "model.lora_alpha: 1e+300 over the rank 8 scales the adapter by 1.25e+299, past the 10000",
    ),
    (
        ["model.lora_rank=8", "model.target_modules=[]"],
        "model.target_modules: give module names (q_proj, ...) or all-linear",
    ),
]
UNUSED = [  # rank 0: no adapter is built, so nothing reads these
    ["model.lora_rank=0", "model.lora_alpha=-1"],
    ["model.lora_rank=0", "model.lora_alpha=0"],
    ["model.lora_rank=0", "model.lora_alpha=1e300"],
    ["model.lora_rank=0", "model.target_modules=[]"],
]


def _fields(overrides: list[str]) -> ModelConfig:
    """The ModelConfig `overrides` make, built without the loader's checks."""
    values = dict(item.removeprefix("model.").split("=", 1) for item in overrides)
    kinds = {
        "lora_rank": int,
        "lora_alpha": float,
        "target_modules": lambda v: [] if v == "[]" else v,
    }
    return ModelConfig(**{key: kinds[key](value) for key, value in values.items()})


@pytest.mark.parametrize(("overrides", "says"), BAD)
def test_the_loader_refuses_with_the_model_builds_line(overrides, says):
    with pytest.raises(ConfigError) as loaded:
        load_config(SFTConfig, None, overrides)
    with pytest.raises(ConfigError) as built:
        check_lora_fields(_fields(overrides))  # what apply_lora runs at model build
    assert str(loaded.value) == str(built.value)
    assert str(loaded.value).startswith(says)


@pytest.mark.parametrize("overrides", UNUSED)
def test_an_unused_alpha_or_target_list_is_accepted_with_lora_off(overrides, caplog):
    cfg = load_config(SFTConfig, None, overrides)
    assert cfg.model.lora_rank == 0
    check_lora_fields(_fields(overrides))
    assert [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")] == []


@pytest.mark.parametrize(("overrides", "says"), BAD)
def test_config_check_exits_2_with_trains_line(tmp_path, overrides, says):
    done = mfsdp(
        *("config", "check", "sft", "--config", "examples/sft_tiny_cpu.yaml"),
        *overrides,
        f"data.train_files={write_chat_jsonl(tmp_path / 'train.jsonl')}",
        f"trainer.run_dir={tmp_path / 'run'}",
    )
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, says)


def test_config_check_passes_an_unused_alpha_without_a_word(tmp_path):
    done = mfsdp(
        *("config", "check", "sft", "--config", "examples/sft_tiny_cpu.yaml"),
        *("model.lora_rank=0", "model.lora_alpha=-1"),
        f"data.train_files={write_chat_jsonl(tmp_path / 'train.jsonl')}",
        f"trainer.run_dir={tmp_path / 'run'}",
    )
    assert done.returncode == 0, done.stderr
    assert "lora" not in done.stderr.lower()


def test_the_check_loads_no_torch():
    body = (
        "from trainer.config import ConfigError, SFTConfig, load_config\n"
        "try:\n"
        "    load_config(SFTConfig, None, ['model.lora_rank=8', 'model.lora_alpha=1e300'])\n"
        "except ConfigError as err:\n"
        "    print(err)\n"
        "else:\n"
        "    raise SystemExit('not refused')\n"
    )
    assert modules_after(body, roots=("torch", "peft", "transformers")) == []
