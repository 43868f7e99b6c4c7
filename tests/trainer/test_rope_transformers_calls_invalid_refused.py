"""A RoPE config whose values transformers' own validator calls invalid (a yarn factor of -1,
an unknown rope_type, a rope_theta that is text) is refused in one line naming config.json
or model.overrides and the field (exit 2), before the model is built: it trained, and
transformers' warning was printed four times. What the validator only advises about
(Qwen3's yarn factor, which differs from max_position_embeddings /
original_max_position_embeddings) and what changes nothing it computes (a key the rope type
does not read, Llama 3's original_max_position_embeddings not under max_position_embeddings)
still trains, its warning said once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.model_dirs import config_edit, train_from
from trainer.config import ConfigError, ModelConfig
from trainer.model import build_hf_config, load_tokenizer

YARN = {"rope_type": "yarn", "original_max_position_embeddings": 64}
FACTOR_FIELD = "`rope_parameters`'s factor field must be a float or int >= 1, got -1"
_ORIGINAL = {"original_max_position_embeddings": 64}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
LLAMA3 |= _ORIGINAL


def _model(trainable, tmp_path: Path, **changes: object) -> Path:
    model = Path(shutil.copytree(trainable[0], tmp_path / "model"))
    config_edit(**changes)(model)
    return model


def _config(model: Path, **overrides: object):
    cfg = ModelConfig(path=str(model), overrides=overrides)
    return build_hf_config(cfg, load_tokenizer(cfg))


FILE_CASES = {
    "yarn-factor-in-rope-scaling": (
        {"rope_scaling": {"type": "yarn", "factor": -1}},
        "rope_scaling.factor",
        FACTOR_FIELD,
    ),
    "yarn-factor-in-rope-parameters": (
        {"rope_parameters": {**YARN, "factor": -1, "rope_theta": 1e4}},
        "rope_parameters.factor",
        FACTOR_FIELD,
    ),
    "unknown-rope-type": (
        {"rope_parameters": {"rope_type": "nonsense", "rope_theta": 1e4}},
        "rope_parameters.rope_type",
        "for 'rope_type'='nonsense'",
    ),
    "rope-theta-text": (
        {"rope_parameters": {"rope_type": "default", "rope_theta": "x"}},
        "rope_parameters.rope_theta",
        "rope_theta is 'x', not float | None",
    ),
    "top-level-rope-theta-text": (
        {"rope_parameters": None, "rope_theta": "x"},
        "rope_theta",
        "rope_theta is 'x', not float | None",
    ),
}


@pytest.mark.parametrize("case", list(FILE_CASES))
def test_config_json_is_named_with_the_field(trainable, tmp_path, case, caplog):
    changes, field, reason = FILE_CASES[case]
    model = _model(trainable, tmp_path, **changes)
    with pytest.raises(ConfigError) as raised:
        _config(model)
    said = str(raised.value)
    assert said.startswith(f"{model / 'config.json'}: {field}: transformers' RoPE validation")
    assert reason in said, said
    assert not [record for record in caplog.records if "rope" in record.getMessage()]


OVERRIDE_CASES = {
    "factor": ({"factor": -1}, "model.overrides.factor", FACTOR_FIELD),
    "rope-type": (
        {"rope_parameters": {"rope_type": "nonsense"}},
        "model.overrides.rope_parameters.rope_type",
        "for 'rope_type'='nonsense'",
    ),
}


@pytest.mark.parametrize("case", list(OVERRIDE_CASES))
def test_model_overrides_are_named_with_the_key(trainable, tmp_path, case):
    overrides, key, reason = OVERRIDE_CASES[case]
    model = _model(trainable, tmp_path, rope_parameters={**YARN, "factor": 2.0, "rope_theta": 1e4})
    with pytest.raises(ConfigError, match=rf"^{key}: transformers' RoPE validation") as raised:
        _config(model, **overrides)
    assert reason in str(raised.value)


def test_an_override_that_makes_the_rope_valid_trains(trainable, tmp_path):
    model = _model(trainable, tmp_path, rope_scaling={"type": "yarn", "factor": -1})
    assert _config(model, rope_scaling=None).rope_parameters["rope_type"] == "default"


@pytest.mark.parametrize(
    ("changes", "rope_type"),
    [
        # Qwen3's own yarn setting: transformers advises, once, that the factor differs
        ({"max_position_embeddings": 80, "rope_parameters": {**YARN, "factor": 4.0}}, "yarn"),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 1000000}}, "default"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "linear"),
        # a key the rope type does not read: transformers ignores it
        (
            {
                "max_position_embeddings": 256,
                "rope_scaling": {"type": "yarn", "factor": 4.0, **_ORIGINAL, "finetuned": True},
            },
            "yarn",
        ),
        # Llama 3.1's scaling with max_position_embeddings at its original length: the llama3
        # frequencies never read max_position_embeddings
        ({"max_position_embeddings": 64, "rope_scaling": LLAMA3}, "llama3"),
    ],
    ids=["qwen3-yarn", "int-theta", "linear", "unread-key", "llama3-unextended"],
)
def test_what_transformers_takes_is_taken(trainable, tmp_path, changes, rope_type):
    model = _model(trainable, tmp_path, **changes)
    assert _config(model).rope_parameters["rope_type"] == rope_type


def test_train_refuses_in_one_line_before_the_model_is_built(trainable, tmp_path):
    model = _model(
        trainable,
        tmp_path,
        rope_scaling={"type": "yarn", "factor": -1},
        rope_parameters={"rope_type": "nonsense", "rope_theta": "x"},
    )
    run = tmp_path / "run"
    code, stderr = train_from(model, trainable[1], run)
    assert code == 2, stderr
    one_error(stderr, f"{model / 'config.json'}: rope_scaling.factor: ", FACTOR_FIELD)
    assert not run.exists()


def test_a_warning_let_through_is_said_once(trainable, tmp_path, capfd):
    """transformers logs its warning each time a config is built, four times a run."""
    unread = {"rope_type": "default", "rope_theta": 1e4, "factr": 2.0}
    model = _model(trainable, tmp_path, rope_parameters=unread)
    _config(model)
    _config(model)
    said = capfd.readouterr().err
    assert said.count("Unrecognized keys in `rope_parameters` for 'rope_type'='default'") <= 1, said
