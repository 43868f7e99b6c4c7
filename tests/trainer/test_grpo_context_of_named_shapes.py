"""A GRPO run on a named shape (`model.shape`, no model dir) is held to that shape's context
before launch, as a model dir's run is: its prompt and response lengths over the shape's
max_position_embeddings (or `model.overrides`' own) are refused in one line naming where the
limit comes from, exit 2. Without a model dir nothing was checked: vLLM crashed with a
traceback once the ranks had loaded, and the hf engine rotated positions the model never
trained on (the default shape, tiny, takes 512 tokens; GRPO's default lengths are 512 + 512)."""

import json
from pathlib import Path

import pytest

from tests.support.fresh_python import mfsdp
from tests.support.grpo import grpo_config, write_rl_rows
from trainer.config import ConfigError
from trainer.prerequisites import check_prerequisites
from trainer.shapes import SHAPES
from trainer.tiny import tiny_config_kwargs

PROMPT = 32  # data.max_prompt_length in every config here
TINY_POSITIONS = tiny_config_kwargs(vocab_size=1)["max_position_embeddings"]
SHAPE_POSITIONS = {"tiny": TINY_POSITIONS} | {
    name: fields["max_position_embeddings"] for name, fields in SHAPES.items()
}


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> Path:
    return write_rl_rows(tmp_path_factory.mktemp("shape_context") / "rl.jsonl")


def _check(rows: Path, run: Path, response: int, *overrides: str) -> None:
    check_prerequisites(
        grpo_config(
            rows,
            run,
            f"data.max_prompt_length={PROMPT}",
            f"rollout.max_response_length={response}",
            *overrides,
        )
    )


@pytest.mark.parametrize("engine", ["hf", "vllm"])
@pytest.mark.parametrize("shape", sorted(SHAPE_POSITIONS))
def test_a_named_shapes_context_is_checked_naming_the_shape(rows, tmp_path, shape, engine):
    limit = SHAPE_POSITIONS[shape]
    chosen = (f"model.shape={shape}", f"rollout.name={engine}")
    _check(rows, tmp_path, limit - PROMPT, *chosen)  # at the limit
    with pytest.raises(ConfigError) as caught:
        _check(rows, tmp_path, limit - PROMPT + 1, *chosen)
    said = str(caught.value)
    assert said.startswith("data.max_prompt_length + rollout.max_response_length = "), said
    assert said.endswith(
        f"more than the {limit} the model takes (max_position_embeddings in model.shape={shape});"
        f" lower them to {limit} together"
    ), said


def test_model_overrides_on_a_shape_set_the_limit_and_are_named(rows, tmp_path):
    shorter = 64
    shrunk = ("model.shape=qwen2-0.5b", f"model.overrides.max_position_embeddings={shorter}")
    _check(rows, tmp_path, shorter - PROMPT, *shrunk)
    with pytest.raises(ConfigError) as caught:
        _check(rows, tmp_path, shorter - PROMPT + 1, *shrunk)
    assert str(caught.value).endswith(
        f"(max_position_embeddings in model.overrides); lower them to {shorter} together"
    ), caught.value


def test_a_rope_scaling_override_on_a_shape_extends_its_limit(rows, tmp_path):
    scaled = 2 * TINY_POSITIONS
    linear = json.dumps({"rope_type": "linear", "factor": 2.0})
    _check(rows, tmp_path, scaled - PROMPT, f"model.overrides.rope_scaling={linear}")
    with pytest.raises(ConfigError, match=rf"more than the {scaled} the model takes"):
        _check(rows, tmp_path, scaled - PROMPT + 1, f"model.overrides.rope_scaling={linear}")


def test_train_grpo_on_the_tiny_shape_refuses_it_in_one_line_exit_2(rows, tmp_path):
    done = mfsdp(
        "train",
        "grpo",
        "--config",
        "examples/grpo_tiny_cpu.yaml",
        f"data.train_files=[{rows}]",
        "data.val_files=[]",
        f"trainer.run_dir={tmp_path / 'run'}",
        f"data.max_prompt_length={TINY_POSITIONS}",
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert "data.max_prompt_length + rollout.max_response_length" in errors[0], errors[0]
    assert "in model.shape=tiny" in errors[0], errors[0]
    assert "Traceback" not in done.stderr


def test_a_config_of_defaults_is_told_the_model_is_what_is_missing(rows, tmp_path):
    """`mfsdp config defaults grpo` run with only data.train_files set: verl's default lengths
    (512 + 512) on the default shape's 512 positions. 'Lower them' alone hid that the run
    had no model to train."""
    done = mfsdp(
        "train",
        "grpo",
        f"data.train_files=[{rows}]",
        f"trainer.run_dir={tmp_path / 'run'}",
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert errors[0].endswith(
        f"lower them to {TINY_POSITIONS} together, or set model.path to the model to train (both"
        " lengths are at their defaults, verl's, and model.shape=tiny is a random-init model of"
        " that shape)"
    ), errors[0]
