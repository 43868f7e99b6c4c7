"""`model.overrides` keys and values are checked against the model's transformers config
before anything is built (`trainer/model_overrides.py`): a typo trained the default shape
without a word (a junk field in config.json; from a model dir it was dropped), and a value
of the wrong type was an 83-line traceback from huggingface_hub's strict dataclasses."""

from __future__ import annotations

import json

import pytest
from transformers import Qwen2Config

from tests.support.cli_errors import one_error
from tests.support.model_dirs import train
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError, ModelConfig
from trainer.model import build_hf_config, load_tokenizer
from trainer.tiny import build_tokenizer, tiny_config_kwargs


def _config(**model: object):
    cfg = ModelConfig(**model)
    return build_hf_config(cfg, load_tokenizer(cfg))


def _refused(words: str, **model: object) -> str:
    with pytest.raises(ConfigError) as caught:
        _config(**model)
    message = str(caught.value)
    assert message.startswith(words) and "\n" not in message, message
    return message


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A Qwen2 model dir holding only config.json and the tokenizer (random_init reads no
    weights)."""
    root = tmp_path_factory.mktemp("model")
    tokenizer = build_tokenizer()
    Qwen2Config(**tiny_config_kwargs(len(tokenizer))).save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


@pytest.mark.parametrize("shape", ["tiny", "llama3.2-1b"])
def test_a_misspelt_key_is_refused_with_the_field_meant(shape):
    message = _refused(
        "model.overrides.num_hiden_layers: not a field of",
        shape=shape,
        overrides={"num_hiden_layers": 1},
    )
    assert message.endswith("; did you mean num_hidden_layers?"), message


def test_a_misspelt_key_is_refused_for_a_model_dir_too(model_dir):
    """transformers' from_pretrained dropped it without a word."""
    message = _refused(
        "model.overrides.num_hiden_layers: not a field of Qwen2Config",
        path=str(model_dir),
        random_init=True,
        overrides={"num_hiden_layers": 1},
    )
    assert "did you mean num_hidden_layers?" in message


LINEAR = {"rope_type": "linear", "factor": 2.0}


@pytest.mark.parametrize("from_dir", [True, False], ids=["model_dir", "shape"])
@pytest.mark.parametrize(
    "overrides, expected",
    [
        # rope_theta is no field in transformers 5: from a model dir it was dropped
        ({"rope_theta": 5e5}, {"rope_theta": 5e5, "rope_type": "default"}),
        # given together, the rope_scaling property replaced rope_parameters whole: one
        # of the two was lost, whichever came first
        ({"rope_theta": 5e5, "rope_scaling": LINEAR}, {"rope_theta": 5e5, **LINEAR}),
        ({"rope_scaling": LINEAR, "rope_theta": 5e5}, {"rope_theta": 5e5, **LINEAR}),
        # alone (or in its older spelling, or as rope_parameters) it lost the model's theta
        ({"rope_scaling": LINEAR}, {"rope_theta": "own", **LINEAR}),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, {"rope_theta": "own", **LINEAR}),
        ({"rope_parameters": LINEAR}, {"rope_theta": "own", **LINEAR}),
    ],
)
def test_rope_settings_are_set_where_transformers_keeps_them(
    model_dir, from_dir, overrides, expected
):
    source = {"path": str(model_dir), "random_init": True} if from_dir else {}
    own = _config(**source).rope_parameters["rope_theta"]
    config = _config(**source, overrides=overrides)
    expected = {k: own if v == "own" else v for k, v in expected.items()}
    assert config.rope_parameters == expected


def test_head_dim_which_qwen2_attention_reads_is_accepted():
    """No field of Qwen2Config, but transformers' Qwen2 attention reads it: refused was wrong."""
    assert _config(overrides={"head_dim": 64}).head_dim == 64


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("tie_word_embeddings", "false", "Field 'tie_word_embeddings' expected bool"),
        ("rms_norm_eps", "1e-6", "Field 'rms_norm_eps' expected float, got str"),
        ("use_sliding_window", "no", "Field 'use_sliding_window' expected bool"),
    ],
)
def test_a_value_of_the_wrong_type_names_its_key_and_transformers_reason(key, value, expected):
    message = _refused(
        f"model.overrides.{key}: transformers refuses it (",
        overrides={"num_hidden_layers": 1, key: value},
    )
    assert expected in message, message


def test_a_wrong_type_for_a_model_dir_names_the_override_not_config_json(model_dir):
    message = _refused(
        "model.overrides.rms_norm_eps: transformers refuses it (",
        path=str(model_dir),
        random_init=True,
        overrides={"rms_norm_eps": "1e-6"},
    )
    assert "config.json" not in message, message


def test_known_fields_and_settable_properties_are_taken():
    overrides = {
        "num_hidden_layers": 1,
        "attention_dropout": 0.1,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    }
    config = _config(overrides=overrides)
    assert (config.num_hidden_layers, config.attention_dropout) == (1, 0.1)
    assert config.rope_parameters["factor"] == 2.0
    assert overrides["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}  # left as given
    assert "num_hiden_layers" not in json.dumps(config.to_dict())


def test_a_run_with_a_wrong_override_type_ends_in_one_line(tmp_path):
    code, err = train(
        "sft",
        'model.overrides={tie_word_embeddings: "false"}',
        f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.total_steps=1",
        f"data.train_files={write_chat_jsonl(tmp_path / 'train.jsonl', rows=24)}",
    )
    assert code == 2, err
    one_error(err, "model.overrides.tie_word_embeddings: transformers refuses it")
