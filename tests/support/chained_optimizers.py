"""Checkpoints of a tiny Llama stepped by two optimizers chained, as torch's Muon recipe
runs them (Muon on the decoder layers' matrices, AdamW on the rest), and validate's verdict
on one: the tests of how validate and inspect name each parameter's optimizer build the
same run, so a change to the recipe is made once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import optim
from torch.distributed.checkpoint.state_dict import get_state_dict

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp


def layer_matrix(name: str, param: torch.Tensor) -> bool:
    """Whether a parameter is one Muon steps in the recipe: a decoder layer's matrix."""
    return param.ndim == 2 and ".layers." in name


def stepped_beside_adamw(
    root: Path,
    damage: Callable[[dict[str, Any]], None] = lambda optimizer_state: None,
    optimizer: Callable[..., optim.Optimizer] = optim.Muon,
    on: Callable[[str, torch.Tensor], bool] = layer_matrix,
    **settings: Any,
) -> Path:
    """A tiny Llama after one step of `optimizer` (built with `settings`; torch's Muon unless
    named) on the parameters `on(name, param)` picks and AdamW on the rest, saved
    as FSDP2 saves it under `root` with `damage` applied to its optimizer state dict
    (`state` and `param_groups`) first; its config beside it. The checkpoint's path."""
    model = tiny_causal_lm("llama", vocab=64)
    named = dict(model.named_parameters())
    picked = [p for n, p in named.items() if on(n, p)]
    rest = [p for n, p in named.items() if not on(n, p)]
    optimizers = [optimizer(picked, lr=1e-3, **settings), optim.AdamW(rest, lr=1e-3)]
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    model(input_ids=ids, labels=ids).loss.backward()
    for each in optimizers:
        each.step()
    model_state, optimizer_state = get_state_dict(model, optimizers)
    damage(optimizer_state)
    ckpt = save_dcp({"model": model_state, "optimizer": optimizer_state}, root / "dist_ckpt")
    model.config.save_pretrained(root / "huggingface")
    return ckpt


def validated(ckpt: Path, *flags: str) -> tuple[int, list[tuple[str, str, str]], dict]:
    """`mfsdp ckpt validate --json`'s exit code, (severity, where, message) findings and
    optimizer_kind."""
    code, out, _ = run_cli("ckpt", "validate", ckpt, "--json", *flags)
    report = json.loads(out)
    found = [(f["severity"], f["where"], f["message"]) for f in report["findings"]]
    return code, found, report["optimizer_kind"]
