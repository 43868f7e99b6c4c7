"""GRPO's prompt and response lengths (data.max_prompt_length + rollout.max_response_length)
over the context its model takes are refused before any rank starts: one line naming both
keys and the model's limit, exit 2. The demo's own model (max_position_embeddings 512) with
the default lengths (512 + 512) crashed in vLLM's engine with a traceback per rank (exit 1);
the hf engine ran on at positions the model never saw. The limit is the one vLLM derives:
a linear or dynamic rope scaling multiplies it, llama3 has counted its factor in
max_position_embeddings, yarn multiplies its original_max_position_embeddings (a Qwen2.5
config with the 128K yarn block its model card gives was held to 32K), and a gemma3
model's limit is already scaled. Where the check lets a length through that vLLM refuses
(VLLM_ALLOW_LONG_MAX_MODEL_LEN unset in its ranks, a config the check cannot read), vLLM's
own refusal is one line naming the keys."""

import json
from pathlib import Path

import pytest

from tests.support.fresh_python import mfsdp
from tests.support.grpo import grpo_config, write_rl_rows
from tests.support.model_dirs import config_edit, trainable_model_dir
from trainer.config import ConfigError
from trainer.prerequisites import check_prerequisites
from trainer.rollout.vllm_engine import vllm_available

PROMPT = 32  # data.max_prompt_length in every config here


@pytest.fixture(scope="module")
def model_and_rows(tmp_path_factory) -> tuple[Path, Path]:
    """(the tiny model dir, RL rows to train it on)."""
    root = tmp_path_factory.mktemp("context")
    model, _ = trainable_model_dir(root)
    return model, write_rl_rows(root / "rl.jsonl")


def _positions(model: Path) -> int:
    return json.loads((model / "config.json").read_text())["max_position_embeddings"]


def _variant(model: Path, target: Path, **changes: object) -> Path:
    """`model` with `changes` in its config.json (its other files linked)."""
    target.mkdir()
    for path in model.iterdir():
        if path.name != "config.json":
            (target / path.name).symlink_to(path)
    (target / "config.json").write_bytes((model / "config.json").read_bytes())
    config_edit(**changes)(target)
    return target


def _check(model: Path, rows: Path, run: Path, response: int, *overrides: str) -> None:
    cfg = grpo_config(
        rows,
        run,
        f"model.path={model}",
        f"data.max_prompt_length={PROMPT}",
        f"rollout.max_response_length={response}",
        *overrides,
    )
    check_prerequisites(cfg)


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_lengths_over_the_model_context_are_refused_naming_keys_and_limit(
    model_and_rows, tmp_path, engine
):
    model, rows = model_and_rows
    limit = _positions(model)
    with pytest.raises(ConfigError) as caught:
        _check(model, rows, tmp_path, limit - PROMPT + 1, f"rollout.name={engine}")
    said = str(caught.value)
    assert said.startswith("data.max_prompt_length + rollout.max_response_length = "), said
    assert f"more than the {limit} the model takes" in said, said
    assert f"max_position_embeddings in model.path {model / 'config.json'}" in said, said
    _check(model, rows, tmp_path, limit - PROMPT, f"rollout.name={engine}")  # at the limit


def test_train_grpo_refuses_it_in_one_line_exit_2_before_loading(model_and_rows, tmp_path):
    model, rows = model_and_rows
    done = mfsdp(
        "train",
        "grpo",
        "--config",
        "examples/grpo_tiny_cpu.yaml",
        f"model.path={model}",
        f"data.train_files=[{rows}]",
        "data.val_files=[]",
        f"trainer.run_dir={tmp_path / 'run'}",
        f"data.max_prompt_length={_positions(model)}",
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert "data.max_prompt_length + rollout.max_response_length" in errors[0]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("rope_scaling", "factor"),
    [
        ({"rope_type": "linear", "factor": 2.0}, 2),
        ({"type": "dynamic", "factor": 4.0}, 4),
        (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 128,
            },
            1,
        ),
    ],
)
def test_rope_scaling_extends_the_limit_as_vllm_counts_it(
    model_and_rows, tmp_path, rope_scaling, factor
):
    model, rows = model_and_rows
    scaled = _variant(model, tmp_path / "scaled", rope_scaling=rope_scaling)
    limit = _positions(model) * factor
    _check(scaled, rows, tmp_path, limit - PROMPT)
    with pytest.raises(ConfigError, match=rf"more than the {limit} the model takes"):
        _check(scaled, rows, tmp_path, limit - PROMPT + 1)


QWEN25_POSITIONS = 32768  # Qwen2.5's max_position_embeddings, and its yarn block for 128K:
QWEN25_YARN = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
QWEN3_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


@pytest.mark.parametrize(
    ("changes", "overrides", "key"),
    [
        ({"rope_scaling": QWEN25_YARN}, (), "rope_scaling"),
        ({"rope_parameters": {**QWEN3_YARN, "rope_theta": 1e6}}, (), "rope_parameters"),
        ({}, (f"model.overrides.rope_scaling={json.dumps(QWEN25_YARN)}",), "rope_scaling"),
    ],
    ids=["rope_scaling", "rope_parameters", "model.overrides"],
)
def test_yarn_multiplies_its_original_length_by_its_factor(
    model_and_rows, tmp_path, changes, overrides, key
):
    model, rows = model_and_rows
    qwen = _variant(model, tmp_path / "qwen", max_position_embeddings=QWEN25_POSITIONS, **changes)
    limit = 32768 * 4
    _check(qwen, rows, tmp_path, limit - PROMPT, *overrides)
    with pytest.raises(ConfigError) as caught:
        _check(qwen, rows, tmp_path, limit - PROMPT + 1, *overrides)
    said = str(caught.value)
    assert f"more than the {limit} the model takes" in said, said
    assert f"({key}.original_max_position_embeddings x rope factor 4 in " in said, said
    assert said.endswith(f"in model.overrides); lower them to {limit} together") == bool(overrides)


def test_yarn_whose_positions_count_the_factor_is_not_scaled_twice(model_and_rows, tmp_path):
    """DeepSeek-V3's config: max_position_embeddings 163840 = 4096 x 40."""
    model, rows = model_and_rows
    yarn = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}
    deepseek = _variant(model, tmp_path / "ds", max_position_embeddings=163840, rope_scaling=yarn)
    _check(deepseek, rows, tmp_path, 163840 - PROMPT)
    with pytest.raises(ConfigError, match=r"more than the 163840 the model takes"):
        _check(deepseek, rows, tmp_path, 163840 - PROMPT + 1)


def test_a_gemma3_models_limit_is_not_multiplied_by_its_factor(model_and_rows, tmp_path):
    """Gemma 3's text config: 131072 positions with a linear x8 rope scaling."""
    model, rows = model_and_rows
    gemma = _variant(
        model,
        tmp_path / "gemma",
        model_type="gemma3_text",
        max_position_embeddings=131072,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
    )
    _check(gemma, rows, tmp_path, 131072 - PROMPT)
    with pytest.raises(ConfigError) as caught:
        _check(gemma, rows, tmp_path, 131072 - PROMPT + 1)
    said = str(caught.value)
    assert "more than the 131072 the model takes (max_position_embeddings in " in said, said


def test_model_overrides_and_vllms_own_switch_are_heeded(model_and_rows, tmp_path, monkeypatch):
    model, rows = model_and_rows
    longer = 2 * _positions(model)
    _check(
        model, rows, tmp_path, longer - PROMPT, f"model.overrides.max_position_embeddings={longer}"
    )
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    _check(model, rows, tmp_path, longer)


@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")
def test_vllms_refusal_where_no_model_dir_tells_is_one_line_naming_the_keys(tmp_path):
    """The engine itself, past the tiny shape's 512 positions: its refusal is one line."""
    from transformers import Qwen2Config

    from tests.support.rollout import build_cpu_engine
    from trainer.model import write_hf_assets
    from trainer.tiny import build_tokenizer, tiny_config_fields

    tokenizer = build_tokenizer()
    config = Qwen2Config(**tiny_config_fields(tokenizer))
    with pytest.raises(ConfigError) as caught:
        build_cpu_engine(
            "vllm",
            config,
            tmp_path / "assets",
            lambda target: write_hf_assets(target, config, tokenizer, None),
            tokenizer=tokenizer,
            max_model_len=config.max_position_embeddings + 1,
        )
    said = str(caught.value)
    assert said.startswith("data.max_prompt_length + rollout.max_response_length = "), said
    assert "\n" not in said and "max_position_embeddings=512" in said, said
