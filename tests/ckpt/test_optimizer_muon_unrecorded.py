"""A Muon state no record names is named by what its state shows, never as plain SGD.

Was: torch's Muon beside AdamW whose param groups lack `ns_steps` (an older writer, groups
flattened without their settings), or a Megatron-LM `--optimizer muon` run whose args do not
name the optimizer, read as "Adam + SGD" in inspect and validate, though momentum on the
matrices alone beside Adam's moments on the rest is Muon's layout. SGD chained the same way
keeps the same momentum_buffer, so the state says "momentum (SGD or Muon)"; momentum on a
vector, which no Muon steps, stays SGD's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import optim

from tests.support.chained_optimizers import layer_matrix, stepped_beside_adamw
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

EITHER = "Adam + momentum (SGD or Muon)"
STATES = ["exp_avg", "exp_avg_sq", "momentum_buffer", "step"]


def _kinds(ckpt: Path) -> tuple[int, dict, dict]:
    """validate's exit code and the optimizer_kind validate and inspect report."""
    code, out, _ = run_cli("ckpt", "validate", ckpt, "--json")
    validated = json.loads(out)
    _, out, _ = run_cli("ckpt", "inspect", ckpt, "--json")
    return code, validated["optimizer_kind"], json.loads(out)["optimizer_kind"]


def _momentum_beside_adamw(root: Path, momentum_on, momentum) -> Path:
    """A tiny Llama after one step of `momentum` (an optimizer class keeping momentum_buffer)
    on the parameters `momentum_on(name, param)` picks and AdamW on the rest, saved as FSDP2
    saves it, its param groups without Muon's `ns_steps`."""

    def without_ns_steps(optimizer_state: dict) -> None:
        for group in optimizer_state["param_groups"]:
            group.pop("ns_steps", None)

    return stepped_beside_adamw(root, without_ns_steps, momentum, momentum_on, momentum=0.9)


def test_torch_muon_without_ns_steps_is_named_by_its_layout(tmp_path):
    code, validated, inspected = _kinds(_momentum_beside_adamw(tmp_path, layer_matrix, optim.Muon))
    assert code == 0 and validated == inspected == {"name": EITHER, "states": STATES}


def test_sgd_momentum_on_a_vector_stays_sgd(tmp_path):
    def norms_too(name: str, param: torch.Tensor) -> bool:
        return layer_matrix(name, param) or name.endswith("norm.weight")

    code, validated, inspected = _kinds(_momentum_beside_adamw(tmp_path, norms_too, optim.SGD))
    assert code == 0 and validated == inspected == {"name": "Adam + SGD", "states": STATES}


def _megatron_muon(root: Path) -> Path:
    """A Megatron-LM muon run whose args do not name the optimizer: momentum_buffer on the
    decoder layers' linear weights, Adam's states on the rest (emerging_optimizers.py routes
    embeddings, the output layer and every non-2-D parameter to Adam)."""
    model = tiny_causal_lm("llama", vocab=64)

    def muon(adam: dict) -> dict:
        for name, states in adam["state"].items():
            if ".layers." in name and states["exp_avg"].ndim == 2:
                adam["state"][name] = {"momentum_buffer": torch.zeros_like(states["exp_avg"])}
        return adam

    recorded = megatron_args(model)
    vars(recorded).pop("optimizer", None)
    return megatron_run(root, model, recorded, optimizer=muon)


def test_megatron_muon_whose_args_name_no_optimizer_is_named_by_its_layout(tmp_path):
    code, validated, inspected = _kinds(_megatron_muon(tmp_path))
    assert code == 0 and validated["name"] == inspected["name"] == EITHER
