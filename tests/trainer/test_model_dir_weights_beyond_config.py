"""A model dir whose weight files hold another model than its config.json builds is refused
before anything loads (trainer/model_weights.py), in one line naming the file, exit 2:
weights of more layers than config.json (or any tensor the model has no place for) trained
the smaller model and exited 0, transformers dropping them with a load report spread over
lines; a weight no file holds would start from random values. The check is in
`build_model`, which SFT, GRPO's actor and reference and a LoRA run's base all build
through. A per-layer RoPE buffer of older saves, computed from the config, stays accepted,
as transformers accepts it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.support.cli_errors import one_error
from tests.support.model_dirs import train_from
from trainer.config import ModelConfig
from trainer.model_weights import ModelWeightsError

WEIGHTS = "model.safetensors"
Tensors = dict[str, torch.Tensor]


def _build(cfg: ModelConfig) -> torch.nn.Module:
    from trainer.model import build_hf_config, build_model, load_tokenizer

    return build_model(cfg, build_hf_config(cfg, load_tokenizer(cfg)), torch.device("cpu"), 0)


def _edited(source: Path, root: Path, edit: Callable[[Tensors], None]) -> Path:
    """A copy of the model dir `source` under `root` with its tensors edited by `edit`."""
    model = Path(shutil.copytree(source, root / "model"))
    tensors = load_file(str(model / WEIGHTS))
    edit(tensors)
    save_file(tensors, str(model / WEIGHTS), metadata={"format": "pt"})
    return model


def _two_more_layers(tensors: Tensors) -> None:
    for name, tensor in list(tensors.items()):
        if name.startswith("model.layers.1."):
            for layer in (2, 3):
                tensors[name.replace("layers.1.", f"layers.{layer}.")] = tensor.clone()


def _stray(tensors: Tensors) -> None:
    tensors["score.weight"] = tensors["model.norm.weight"].clone()


def _no_second_layer(tensors: Tensors) -> None:
    for name in [name for name in tensors if name.startswith("model.layers.1.")]:
        del tensors[name]


def _rope_buffers(tensors: Tensors) -> None:
    for layer in (0, 1):
        tensors[f"model.layers.{layer}.self_attn.rotary_emb.inv_freq"] = torch.ones(8)


REFUSED = {
    "more-layers": (
        _two_more_layers,
        "24 tensor(s) the qwen2 model of config.json has no place for, e.g."
        " 'model.layers.2.input_layernorm.weight'; it says num_hidden_layers=2, the weights"
        " hold layers 0-3; transformers would drop them",
    ),
    "stray-tensor": (
        _stray,
        "1 tensor(s) the qwen2 model of config.json has no place for, e.g. 'score.weight';"
        " transformers would drop them",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_tensor_the_model_has_no_place_for_is_refused_naming_its_file(trainable, tmp_path, case):
    edit, says = REFUSED[case]
    model = _edited(trainable[0], tmp_path, edit)
    for cfg in (ModelConfig(path=str(model)), ModelConfig(path=str(model), lora_rank=2)):
        with pytest.raises(ModelWeightsError) as caught:
            _build(cfg)
        assert caught.value.exit_code == 2
        assert str(caught.value) == f"{model / WEIGHTS}: {says}" + (
            " and train a model other than the weights hold"
        )


def test_layers_the_overrides_take_away_are_left_out_with_a_note(trainable, caplog):
    """A base of 2 layers trained under `num_hidden_layers: 1` is the user's choice: the
    model holds layer 0 of the weights, and one note names what is left out."""
    cfg = ModelConfig(path=str(trainable[0]), overrides={"num_hidden_layers": 1})
    with caplog.at_level("WARNING", logger="mfsdp.model"):
        built = _build(cfg)
    stored = load_file(str(trainable[0] / WEIGHTS))
    params = dict(built.named_parameters())
    assert not any(".layers.1." in name for name in params)
    assert all(torch.equal(params[name], stored[name]) for name in params)
    notes = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert notes == [
        f"note: 12 tensor(s) of {trainable[0]} (e.g. 'model.layers.1.input_layernorm.weight')"
        " are left out: model.overrides build a model without them"
    ]


def test_overrides_do_not_excuse_tensors_config_json_has_no_place_for(trainable, tmp_path):
    model = _edited(trainable[0], tmp_path, _two_more_layers)
    cfg = ModelConfig(path=str(model), overrides={"num_hidden_layers": 1})
    with pytest.raises(ModelWeightsError) as caught:
        _build(cfg)
    assert str(caught.value).startswith(
        f"{model / WEIGHTS}: 36 tensor(s) the qwen2 model of config.json with"
        " model.overrides has no place for, e.g. 'model.layers.1.input_layernorm.weight';"
        " it says num_hidden_layers=1, the weights hold layers 0-3;"
    )


def test_a_weight_no_file_holds_is_refused(trainable, tmp_path):
    model = _edited(trainable[0], tmp_path, _no_second_layer)
    with pytest.raises(ModelWeightsError) as caught:
        _build(ModelConfig(path=str(model)))
    assert caught.value.exit_code == 2
    assert str(caught.value) == (
        f"{model}: weights lack 12 tensor(s) config.json needs, e.g."
        " model.layers.1.input_layernorm.weight"
    )


def test_rope_buffers_of_older_saves_are_accepted_as_transformers_accepts_them(trainable, tmp_path):
    model = _edited(trainable[0], tmp_path, _rope_buffers)
    built = _build(ModelConfig(path=str(model)))
    stored = load_file(str(trainable[0] / WEIGHTS))
    params = dict(built.named_parameters())
    assert all(torch.equal(params[name], tensor) for name, tensor in stored.items())


def test_training_from_weights_of_more_layers_stops_before_it_starts(trainable, tmp_path):
    source, table = trainable
    model = _edited(source, tmp_path, _two_more_layers)
    code, err = train_from(model, table, tmp_path / "run")
    assert code == 2, err
    one_error(err, f"{model / WEIGHTS}: 24 tensor(s)", "layers 0-3")
    assert "LOAD REPORT" not in err
    assert not (tmp_path / "run").exists()


def _as_llama_without_defaults(model: Path) -> None:
    """The tiny model as a Llama whose config.json leaves out what transformers fills in
    (num_key_value_heads: one per head; tie_word_embeddings: false), as older Llama
    configs do."""
    tensors = load_file(str(model / WEIGHTS))
    for name in [name for name in tensors if name.endswith(".bias")]:
        del tensors[name]
    for name in [name for name in tensors if ".k_proj." in name or ".v_proj." in name]:
        tensors[name] = torch.cat([tensors[name], tensors[name]], 0)
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, str(model / WEIGHTS), metadata={"format": "pt"})
    config = json.loads((model / "config.json").read_text())
    for key in ("num_key_value_heads", "tie_word_embeddings", "max_window_layers"):
        config.pop(key, None)
    for key in ("use_sliding_window", "sliding_window", "layer_types"):
        config.pop(key, None)
    config.update(model_type="llama", architectures=["LlamaForCausalLM"])
    (model / "config.json").write_text(json.dumps(config))


def test_overrides_over_a_config_json_that_leaves_defaults_out_take_layers_away(
    trainable, tmp_path, caplog
):
    """config.json's own model is the one transformers builds from it, defaults filled in:
    read from the file alone, a Llama without num_key_value_heads had no table, and the
    layers `num_hidden_layers: 1` takes away were refused as strangers."""
    model = Path(shutil.copytree(trainable[0], tmp_path / "llama"))
    _as_llama_without_defaults(model)
    cfg = ModelConfig(path=str(model), overrides={"num_hidden_layers": 1})
    with caplog.at_level("WARNING", logger="mfsdp.model"):
        built = _build(cfg)
    assert not any(".layers.1." in name for name, _ in built.named_parameters())
    assert any("are left out: model.overrides" in r.getMessage() for r in caplog.records)
