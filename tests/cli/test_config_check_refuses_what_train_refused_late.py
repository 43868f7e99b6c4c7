"""What `mfsdp train` refused from the config alone only once torch had loaded (or never) is
refused by `mfsdp config check` and by train's launcher, exit 2, one line naming the key:

- `checkpoint.resume` that is neither auto nor disable nor a checkpoint (`disabled`, a
  missing path, a Hugging Face model dir): train said `disabled: no such file or directory`
  after building the model, naming neither the key nor the word meant;
- an unknown `model.shape` (`Qwen2-0.5B`), which also left a GRPO run's lengths unchecked;
- an unknown `model.attn_implementation` (`spda`), refused by transformers with its list of
  choices cut mid-way;
- a tokenizer dir of tokenizer_config.json alone, whose tokenizer turned text into no tokens;
- `strategy.name=megatron_fsdp` with `trainer.device=cpu`, refused only once train checked
  the machine (config check said ok).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.config_check import check_config
from cli.launch import load_checked_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.fresh_python import mfsdp
from tests.support.grpo import write_rl_rows
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError, SFTConfig
from trainer.shapes import SHAPES


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tables")
    return {"sft": write_chat_jsonl(root / "sft.jsonl"), "grpo": write_rl_rows(root / "rl.jsonl")}


def refusal(trainer: str, tables: dict[str, Path], run: Path, *overrides: str) -> str:
    """The one line `mfsdp config check TRAINER` refuses `overrides` with."""
    given = [f"data.train_files=[{tables[trainer]}]", f"trainer.run_dir={run}", *overrides]
    with pytest.raises(MfsdpError) as caught:
        check_config(trainer, None, given)
    said = str(caught.value)
    assert "\n" not in said and caught.value.exit_code == 2, said
    return said


def model_dir(root: Path, *files: str) -> Path:
    """A Hugging Face model dir (config.json, weights) holding `files` too."""
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (root / "model.safetensors").touch()
    for name in files:
        (root / name).write_text("{}")
    return root


@pytest.mark.parametrize("trainer", ["sft", "grpo"])
@pytest.mark.parametrize("word", ["disabled", "Auto", "disble"])
def test_a_resume_word_mistyped_names_the_key_and_the_word(
    tables, tmp_path, monkeypatch, trainer, word
):
    monkeypatch.chdir(tmp_path)
    said = refusal(trainer, tables, tmp_path / "run", f"checkpoint.resume={word}")
    meant = "auto" if word == "Auto" else "disable"
    assert said == (
        f"checkpoint.resume: {word} does not exist (auto | disable | a run, step or dist_ckpt"
        f" dir is needed; nothing is downloaded; relative paths are read from {tmp_path});"
        f" did you mean {meant}?"
    )


def test_a_missing_resume_path_names_the_key_and_the_path_meant(tables, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    said = refusal("sft", tables, tmp_path / "run", "checkpoint.resume=runs/dem")
    assert said == (
        f"checkpoint.resume: runs/dem: no such file or directory; relative paths are read from"
        f" {tmp_path}; did you mean runs/demo?"
    )


def test_a_model_dir_as_resume_is_told_model_path_takes_it(tables, tmp_path):
    model = model_dir(tmp_path / "hf", "tokenizer.json")
    said = refusal("sft", tables, tmp_path / "run", f"checkpoint.resume={model}")
    assert said.startswith(f"checkpoint.resume: {model} is a Hugging Face model dir"), said
    assert f"give model.path={model}" in said


def test_train_refuses_a_resume_typo_before_torch_loads(tables, tmp_path):
    """The launcher's own check, in one line, and the ranks never started."""
    with pytest.raises(ConfigError, match=r"^checkpoint\.resume: disabled does not exist"):
        load_checked_config(
            SFTConfig, None, [f"trainer.run_dir={tmp_path}/run", "checkpoint.resume=disabled"]
        )
    done = mfsdp(
        "train",
        "sft",
        f"data.train_files=[{tables['sft']}]",
        f"trainer.run_dir={tmp_path / 'run'}",
        "checkpoint.resume=disabled",
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: checkpoint.resume: disabled does not exist (auto | disable | a run, step or"
        f" dist_ckpt dir is needed; nothing is downloaded; relative paths are read from"
        f" {tmp_path}); did you mean disable?"
    ]


def test_the_ranks_own_late_refusal_names_the_key(tmp_path):
    """Where the path went away after the launcher checked it, a rank's lookup names the key
    (torch.distributed is imported: seconds, once for the whole suite)."""
    from trainer.resume import RunKind, resume_target

    sft = RunKind("sft", "data.global_batch_size", ("data.train_files",))
    with pytest.raises(MfsdpError, match=rf"^checkpoint\.resume: {tmp_path}/gone: no such file"):
        resume_target(tmp_path / "run", f"{tmp_path}/gone", sft)


@pytest.mark.parametrize("trainer", ["sft", "grpo"])
@pytest.mark.parametrize(
    "shape, meant", [("Qwen2-0.5B", "qwen2-0.5b"), ("qwen2-05b", "qwen2-0.5b"), ("gpt2", None)]
)
def test_an_unknown_shape_is_refused_with_every_shape(tables, tmp_path, trainer, shape, meant):
    said = refusal(trainer, tables, tmp_path / "run", f"model.shape={shape}")
    hint = f"; did you mean {meant}?" if meant else ""
    assert said == (
        f"model.shape: unknown shape {shape!r}; choose {' | '.join(['tiny', *SHAPES])} or set"
        f" model.path{hint}"
    )


def test_a_shape_beside_a_model_path_is_not_read_so_not_refused(tables, tmp_path):
    model = model_dir(tmp_path / "hf", "tokenizer.json")
    given = [f"data.train_files=[{tables['sft']}]", f"trainer.run_dir={tmp_path}/run"]
    check_config("sft", None, [*given, f"model.path={model}", "model.shape=Qwen2-0.5B"])


def test_an_unknown_attention_is_refused_with_every_name(tables, tmp_path):
    from trainer.attention_names import ATTENTION_NAMES

    said = refusal("sft", tables, tmp_path / "run", "model.attn_implementation=spda")
    assert said == (
        "command-line override: model.attn_implementation: unknown attention 'spda'; choose"
        f" {' | '.join(ATTENTION_NAMES)}; did you mean sdpa?"
    )
    for name in ATTENTION_NAMES:  # each is taken
        check_config(
            "sft",
            None,
            [
                f"data.train_files=[{tables['sft']}]",
                f"trainer.run_dir={tmp_path}/run",
                f"model.attn_implementation={name}",
            ],
        )


@pytest.mark.parametrize("key", ["model.path", "model.tokenizer"])
def test_a_tokenizer_config_without_vocabulary_is_refused(tables, tmp_path, key):
    model = model_dir(tmp_path / "hf", "tokenizer_config.json")
    said = refusal("sft", tables, tmp_path / "run", f"{key}={model}")
    assert said.startswith(
        f"{key}: no tokenizer vocabulary in {model} (tokenizer_config.json but none of"
        " tokenizer.json, "
    ), said
    assert said.endswith("a local dir with the model's tokenizer files"), said


@pytest.mark.parametrize("trainer", ["sft", "grpo"])
def test_megatron_fsdp_on_cpu_is_refused_by_the_config_alone(tables, tmp_path, trainer):
    keys = ["strategy.name=megatron_fsdp", "model.shape=tiny"]
    if trainer == "grpo":  # lengths the tiny shape takes
        keys += ["data.max_prompt_length=32", "rollout.max_response_length=16"]
    said = refusal(trainer, tables, tmp_path / "run", *keys, "trainer.device=cpu")
    assert said == "strategy.name=megatron_fsdp needs CUDA; use strategy.name=fsdp2 on CPU"
    given = [f"data.train_files=[{tables[trainer]}]", f"trainer.run_dir={tmp_path / 'run'}"]
    cfg = check_config(trainer, None, [*given, *keys, "trainer.device=auto"])  # the machine's
    assert cfg.strategy.name == "megatron_fsdp"
