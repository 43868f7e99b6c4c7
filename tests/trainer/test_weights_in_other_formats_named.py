"""A model dir whose weights are in another format than safetensors (torch.save's `.pt`,
llama.cpp's `.gguf`) is told which file that is and how to convert it, wherever mfsdp looks
for weights: `mfsdp train` said "has config.json but no weights (*.safetensors); set
model.random_init=true", advice to throw the weights away, and export-hf merging a LoRA
adapter onto such a base said only "no *.safetensors base weights". A model dir's pickled
weights are listed as every long list is, the count of the rest said."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ckpt.test_interop_megatron_peft import BRIDGE_PEFT, _bridge_lora_run, _hf_lora
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from trainer.config import ConfigError, ModelConfig
from trainer.model_code import check_model_files
from trainer.model_source import resolve_model_source

CONVERT = "then save_pretrained writes safetensors"
OTHER_FORMATS = {
    "model.pt": "model.pt is a pickle, which mfsdp never loads",
    "model-q4_k_m.gguf": "model-q4_k_m.gguf is GGUF (llama.cpp's format)",
}


def _config_beside(tmp_path: Path, *names: str) -> Path:
    """A model dir of config.json and `names`, files never read."""
    model = tmp_path / "model"
    tiny_causal_lm("qwen2", vocab=64).config.save_pretrained(model)
    for name in names:
        (model / name).write_bytes(b"not read")
    return model


@pytest.mark.parametrize("name", list(OTHER_FORMATS))
def test_training_names_weights_in_another_format_not_random_init(tmp_path, name):
    model = _config_beside(tmp_path, name)
    with pytest.raises(ConfigError) as refused:
        resolve_model_source(ModelConfig(path=str(model)))
    said = str(refused.value)
    assert OTHER_FORMATS[name] in said and CONVERT in said, said
    assert "random_init" not in said


def test_training_a_config_alone_still_offers_random_init(tmp_path):
    with pytest.raises(ConfigError, match=r"no weights \(\*\.safetensors\); set model\.random"):
        resolve_model_source(ModelConfig(path=str(_config_beside(tmp_path))))


def test_many_pickled_weights_are_named_first_with_the_count_of_the_rest(tmp_path):
    shards = [f"pytorch_model-0000{i}-of-00004.bin" for i in range(1, 5)]
    model = _config_beside(tmp_path, *shards, "training_args.bin")
    cfg = ModelConfig(path=str(model))
    with pytest.raises(ConfigError) as refused:
        check_model_files(cfg, resolve_model_source(cfg))
    assert f"({shards[0]}, {shards[1]} (+2 more))" in str(refused.value)
    assert "training_args.bin" not in str(refused.value)


def test_a_lora_base_with_weights_in_another_format_names_them(tmp_path):
    model = tiny_causal_lm("llama", vocab=500)
    run, _ = _bridge_lora_run(tmp_path, model, _hf_lora(model), BRIDGE_PEFT)
    base = tmp_path / "base"
    model.config.save_pretrained(base)
    (base / "consolidated.00.pth").write_bytes(b"not read")
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out", "--hf-config", base)
    line = one_error_line(err)
    assert code == 2 and "no *.safetensors base weights" in line, err
    assert "consolidated.00.pth is a pickle" in line and CONVERT in line
    assert not (tmp_path / "out").exists()
