"""`model.overrides` are written into the model's config fields before transformers builds
the config, so what its class derives from them is derived from the overridden values.

Was: from a model dir they were set on the built config, which kept what it had derived
from the old ones (Qwen2's `layer_types`, one entry a layer): `num_hidden_layers: 1` built
and trained every step, and the first save refused the config (`num_hidden_layers` (1)
must be equal to the number of `layer_types` (2)), leaving no checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import LlamaConfig, Qwen2Config

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import ConfigError, ModelConfig
from trainer.model import build_hf_config, load_tokenizer
from trainer.sft import run_sft
from trainer.tiny import build_tiny_model_dir, build_tokenizer, tiny_config_kwargs


def _model_dir(root: Path, config_class: type, **fields: object) -> Path:
    """A model dir of `config_class` as transformers saves it, config.json then given
    `fields` (None: the field left out)."""
    tokenizer = build_tokenizer()
    config_class(**tiny_config_kwargs(len(tokenizer))).save_pretrained(root)
    tokenizer.save_pretrained(root)
    written = json.loads((root / "config.json").read_text())
    written.update(fields)
    written = {key: value for key, value in written.items() if value is not None}
    (root / "config.json").write_text(json.dumps(written))
    return root


def _config(model: Path, overrides: dict) -> object:
    cfg = ModelConfig(path=str(model), random_init=True, overrides=overrides)
    return build_hf_config(cfg, load_tokenizer(cfg))


@pytest.mark.parametrize("listed", [True, False], ids=["layer_types-listed", "not-listed"])
@pytest.mark.parametrize("layers", [1, 3])
def test_qwen2_layer_types_follow_num_hidden_layers(tmp_path, listed, layers):
    """transformers 5 lists `layer_types` in every Qwen2 config.json it saves; an older
    one leaves it out. Either way it is derived again for the overridden layer count, and
    the config saves (the save is where it was refused)."""
    model = _model_dir(tmp_path / "model", Qwen2Config, **({} if listed else {"layer_types": None}))
    assert ("layer_types" in json.loads((model / "config.json").read_text())) is listed
    config = _config(model, {"num_hidden_layers": layers})
    assert config.layer_types == ["full_attention"] * layers
    config.save_pretrained(tmp_path / "saved")
    assert (
        json.loads((tmp_path / "saved" / "config.json").read_text())["num_hidden_layers"] == layers
    )


def test_the_files_other_values_are_kept(tmp_path):
    """Only what the class derives is derived again: a value config.json sets stays."""
    model = _model_dir(tmp_path / "model", Qwen2Config, rms_norm_eps=1e-5, max_window_layers=1)
    config = _config(model, {"num_hidden_layers": 1, "hidden_act": "gelu"})
    assert (config.rms_norm_eps, config.max_window_layers, config.hidden_act) == (1e-5, 1, "gelu")
    assert (
        config.num_key_value_heads
        == json.loads((model / "config.json").read_text())["num_key_value_heads"]
    )


@pytest.mark.parametrize(
    "written", [{"rope_theta": 5e5}, {"rope_scaling": {"type": "linear", "factor": 2.0}}]
)
def test_an_older_rope_spelling_in_the_file_does_not_win_over_the_override(tmp_path, written):
    """config.json's `rope_theta` / `rope_scaling` (what transformers 4 wrote) are moved
    into `rope_parameters` by transformers; written beside the overridden one, they won."""
    model = _model_dir(tmp_path / "model", Qwen2Config, rope_parameters=None, **written)
    config = _config(model, {"num_hidden_layers": 1, "rope_theta": 1e6})
    assert config.rope_parameters["rope_theta"] == 1e6
    assert config.layer_types == ["full_attention"]


def test_layer_types_set_by_hand_are_refused_naming_both(tmp_path):
    """A `layer_types` that is not what Qwen2 derives from the file (a sliding layer where
    it derives none) is the model's own: not replaced, refused before the model is built."""
    model = _model_dir(
        tmp_path / "model", Qwen2Config, layer_types=["full_attention", "sliding_attention"]
    )
    _config(model, {})  # the file alone is a config transformers takes
    with pytest.raises(ConfigError) as refused:
        _config(model, {"num_hidden_layers": 1})
    message = str(refused.value)
    assert message.startswith("model.overrides.num_hidden_layers: transformers refuses it ("), (
        message
    )
    assert "`layer_types` (2)" in message and "\n" not in message, message


def test_llama_takes_a_layer_count_too(tmp_path):
    model = _model_dir(tmp_path / "model", LlamaConfig)
    config = _config(model, {"num_hidden_layers": 1, "num_attention_heads": 2})
    assert (config.num_hidden_layers, config.num_attention_heads) == (1, 2)
    config.save_pretrained(tmp_path / "saved")


def test_the_tiny_shape_still_takes_overrides():
    cfg = ModelConfig(overrides={"num_hidden_layers": 1})
    config = build_hf_config(cfg, load_tokenizer(cfg))
    assert config.layer_types == ["full_attention"]


def test_a_run_from_a_model_dir_with_fewer_layers_saves_its_step(tmp_path):
    """The report's run: trained, then lost at the first save; now its step is saved."""
    model = build_tiny_model_dir(tmp_path / "model", seed=0, with_weights=True)
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    done = run_sft(
        tiny_config(
            data,
            tmp_path / "run",
            f"model.path={model}",
            "trainer.total_steps=1",
            "data.global_batch_size=4",
            "model.overrides={num_hidden_layers: 1}",
        )
    )
    saved = json.loads((done.last_checkpoint / "huggingface" / "config.json").read_text())
    assert (saved["num_hidden_layers"], saved["layer_types"]) == (1, ["full_attention"])
