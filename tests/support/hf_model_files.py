"""Hugging Face model dirs saved by transformers itself, and their safetensors read back
bit for bit: the sources and the comparisons of the import-hf round trips."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

TINY = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    dtype="bfloat16",
)


def tensor_bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def safetensors_tensors(model_dir: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            tensors.update({name: handle.get_tensor(name) for name in handle.keys()})
    return tensors


def assert_same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert torch.equal(tensor_bits(a[name]), tensor_bits(b[name])), name


def saved_hf_model(root: Path, family: str, tied: bool, shard: bool = False) -> Path:
    """A random tiny model saved by transformers itself (bf16, as releases ship)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    extra = {"head_dim": 16} if family == "qwen3" else {}
    config = AutoConfig.for_model(family, tie_word_embeddings=tied, **TINY, **extra)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    out = root / f"{family}_{'tied' if tied else 'untied'}{'_sharded' if shard else ''}"
    model.save_pretrained(out, max_shard_size="40KB" if shard else "5GB")
    return out


def hidden_leftovers(parent: Path) -> list[str]:
    """The dot-named entries (temporary files, locks) an interrupted or refused write left."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def changed_config_dir(model, target: Path, **changes) -> Path:
    """`target` holding `model`'s config.json with `changes` made to its top-level keys: a
    `--hf-config` that disagrees with a checkpoint's record in just those."""
    model.config.save_pretrained(target)
    data = json.loads((target / "config.json").read_text())
    data.update(changes)
    (target / "config.json").write_text(json.dumps(data))
    return target
