"""A model dir's config.json whose sizes or dtype make no model is refused by the launching
process (`check_model_config`), so `mfsdp config check` refuses what train refuses, exit 2
in one line, before torch loads: check said "valid" (exit 0) for num_hidden_layers 10**9,
hidden_size -128 or dtype "evil", which train then refused in every rank (exit 1), while
the same value as a model.override was exit 2 at config time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.model_dirs import config_edit
from trainer.config import ConfigError, ModelConfig
from trainer.model_code import check_model_files
from trainer.model_source import resolve_model_source


def _refusal(cfg: ModelConfig) -> str:
    with pytest.raises(ConfigError) as refused:
        check_model_files(cfg, resolve_model_source(cfg))
    assert "\n" not in str(refused.value)
    return str(refused.value)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"num_hidden_layers": 10**9}, "num_hidden_layers=1000000000 is over the 1024 allowed"),
        ({"hidden_size": -128}, "hidden_size must be a positive integer below 2**63"),
        ({"dtype": "evil"}, "dtype 'evil' is not a floating-point torch dtype"),
        ({"dtype": None, "torch_dtype": 5}, "torch_dtype 5 is not a floating-point torch dtype"),
    ],
)
def test_config_json_that_makes_no_model_is_refused_before_launch(
    trainable, tmp_path, change, says
):
    model = Path(shutil.copytree(trainable[0], tmp_path / "model"))
    config_edit(**change)(model)
    said = _refusal(ModelConfig(path=str(model)))
    assert said.startswith(f"{model / 'config.json'}: {says}"), said


def test_a_dtype_transformers_reads_passes_and_an_unread_alias_is_not_checked(trainable, tmp_path):
    model = Path(shutil.copytree(trainable[0], tmp_path / "model"))
    config_edit(dtype="bfloat16", torch_dtype="evil")(model)  # transformers keeps `dtype`
    cfg = ModelConfig(path=str(model))
    check_model_files(cfg, resolve_model_source(cfg))


def test_a_dtype_override_is_refused_as_the_same_value_in_config_json(trainable):
    cfg = ModelConfig(path=str(trainable[0]), overrides={"torch_dtype": "evil"})
    said = _refusal(cfg)
    assert said == (
        "model.overrides: torch_dtype 'evil' is not a floating-point torch dtype"
        " (bfloat16, float16, float32, ...)"
    )


def test_config_check_exits_2_for_a_value_in_config_json_as_for_the_same_override(
    trainable, tmp_path
):
    model = Path(shutil.copytree(trainable[0], tmp_path / "model"))
    config_edit(num_hidden_layers=2000)(model)
    for path, extra in ((model, []), (trainable[0], ["model.overrides.num_hidden_layers=2000"])):
        done = mfsdp(
            *("config", "check", "sft", "--config", "examples/sft_tiny_cpu.yaml"),
            f"model.path={path}",
            f"data.train_files={trainable[1]}",
            f"trainer.run_dir={tmp_path / 'run'}",
            *extra,
        )
        assert done.returncode == 2, done.stderr
        one_error(done.stderr, "num_hidden_layers=2000 is over the 1024 allowed")
