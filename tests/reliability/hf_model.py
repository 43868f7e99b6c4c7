"""A tiny Hugging Face model dir for the import-hf suites: the mcore fixture's Qwen2 shape,
random weights, the tied embedding stored once (as transformers saves it), a tokenizer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file

from mfsdp_ckpt.convert.hf_shapes import hf_state_dict_shapes
from tests.support.paths import FIXTURES

MCORE_QWEN2 = FIXTURES / "mcore" / "qwen2"
# `mfsdp ckpt export-hf` of that fixture, the checkpoint hf_model's config.json describes:
# the tests add --hf-config and --out.
EXPORT_MCORE_QWEN2 = ("ckpt", "export-hf", MCORE_QWEN2 / "dist_ckpt")


def hf_model(
    root: Path,
    dtype: torch.dtype = torch.float32,
    edit: Callable[[dict[str, torch.Tensor]], None] | None = None,
) -> Path:
    """`root/model`: config.json, tokenizer.json and model.safetensors; `edit` may change
    the tensors before they are saved."""
    model = root / "model"
    model.mkdir()
    config = json.loads((MCORE_QWEN2 / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config))
    (model / "tokenizer.json").write_text('{"mine": true}')
    shapes = hf_state_dict_shapes(config)
    shapes.pop("lm_head.weight")
    generator = torch.Generator().manual_seed(0)
    tensors = {name: torch.randn(s, generator=generator).to(dtype) for name, s in shapes.items()}
    if edit is not None:
        edit(tensors)
    save_file(tensors, str(model / "model.safetensors"))
    return model
