"""A model dir's weights refused against the run's model (trainer/model_weights.py) name what
set the value they do not fit: config.json's own, or `model.overrides` where an override set
it. A base of 2 layers trained under `num_hidden_layers: 4` was refused as lacking tensors
"config.json needs", where config.json says 2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from trainer.config import ModelConfig
from trainer.model_weights import ModelWeightsError

WEIGHTS = "model.safetensors"


def _refusal(model: Path, overrides: dict) -> str:
    from trainer.model import build_hf_config, build_model, load_tokenizer

    cfg = ModelConfig(path=str(model), overrides=overrides)
    with pytest.raises(ModelWeightsError) as caught:
        build_model(cfg, build_hf_config(cfg, load_tokenizer(cfg)), torch.device("cpu"), 0)
    return str(caught.value)


def _without_layer_1(source: Path, root: Path) -> Path:
    model = Path(shutil.copytree(source, root / "model"))
    tensors = load_file(str(model / WEIGHTS))
    kept = {name: t for name, t in tensors.items() if not name.startswith("model.layers.1.")}
    save_file(kept, str(model / WEIGHTS), metadata={"format": "pt"})
    return model


def test_tensors_an_override_adds_name_the_override(trainable):
    said = _refusal(trainable[0], {"num_hidden_layers": 4})
    assert said == (
        f"{trainable[0]}: weights lack 24 tensor(s) the model needs as model.overrides sets"
        " num_hidden_layers=4, e.g. model.layers.2.input_layernorm.weight"
    )


def test_tensors_config_json_needs_still_name_config_json_under_overrides(trainable, tmp_path):
    model = _without_layer_1(trainable[0], tmp_path)
    said = _refusal(model, {"rms_norm_eps": 1e-5})
    assert said == (
        f"{model}: weights lack 12 tensor(s) config.json needs, e.g."
        " model.layers.1.input_layernorm.weight"
    )


def test_a_shape_an_override_sets_names_the_override(trainable):
    said = _refusal(trainable[0], {"intermediate_size": 512})
    assert said == (
        f"{trainable[0]} [model.layers.0.mlp.down_proj.weight]: shape (128, 256), but the model"
        " has (128, 512) as model.overrides sets intermediate_size=512"
    )


def test_a_shape_config_json_sets_names_config_json_under_overrides(trainable, tmp_path):
    model = Path(shutil.copytree(trainable[0], tmp_path / "model"))
    tensors = load_file(str(model / WEIGHTS))
    tensors["model.norm.weight"] = torch.ones(64)
    save_file(tensors, str(model / WEIGHTS), metadata={"format": "pt"})
    said = _refusal(model, {"rms_norm_eps": 1e-5})
    assert said == f"{model} [model.norm.weight]: shape (64,), but config.json says (128,)"
