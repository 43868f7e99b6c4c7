"""validate holds each parameter to its own optimizer's states, whatever the optimizer.

Was: the set was recognised from the names over all parameters, so a run chaining Muon
(momentum_buffer on the linear weights) with Adam (the rest) -- Megatron-LM's
`--optimizer muon`, torch's Muon beside AdamW -- was "no known optimizer's set", nothing
was checked, and a lost exp_avg_sq or a transposed momentum_buffer passed `validate
--deep`; Adam's states with every exp_avg_sq lost were valid where no run record named
Adam, though the stored param groups' betas and eps do; and a weight lost from the model
while its optimizer state was kept was a warning. Now each parameter's set is recognised
(a chain of known sets, Muon named where its param groups or the record say so), every
per-element state is held to its parameter's shape, stored Adam settings stand as the
record, and a parameter-shaped state for a weight the model lost is an error naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import optim
from torch.distributed.checkpoint.state_dict import get_state_dict

from tests.support.chained_optimizers import stepped_beside_adamw
from tests.support.chained_optimizers import validated as _validate
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run, save_dcp


def test_muon_beside_adamw_is_valid_and_named(tmp_path):
    ckpt = stepped_beside_adamw(tmp_path)
    code, found, kind = _validate(ckpt)
    assert (code, found) == (0, [])
    assert kind == {
        "name": "Adam + Muon",
        "states": ["exp_avg", "exp_avg_sq", "momentum_buffer", "step"],
    }
    code, out, _ = run_cli("ckpt", "inspect", ckpt, "--json")
    assert code == 0 and json.loads(out)["optimizer_kind"] == kind


NORM = "model.layers.0.input_layernorm.weight"
UP = "model.layers.1.mlp.up_proj.weight"


def _lose_and_transpose(optimizer_state: dict) -> None:
    states = optimizer_state["state"]
    del states[NORM]["exp_avg_sq"]
    states[UP]["momentum_buffer"] = states[UP]["momentum_buffer"].T.contiguous()


def test_muon_beside_adamw_losing_a_moment_or_transposing_a_momentum_is_invalid(tmp_path):
    code, found, _ = _validate(stepped_beside_adamw(tmp_path, _lose_and_transpose), "--deep")
    state = "optimizer.state.model"
    assert code == 1 and found == [
        (
            "error",
            f"[model.{NORM}]",
            f"optimizer state exp_avg_sq is missing (no [{state}.layers.0.input_layernorm"
            ".weight.exp_avg_sq])",
        ),
        (
            "error",
            f"[{state}.layers.1.mlp.up_proj.weight.momentum_buffer]",
            "shape (128, 192) differs from the parameter's (192, 128)",
        ),
    ]


MCORE = "module.module.module.decoder"


def _megatron_muon(tmp_path: Path, damage=lambda states: None) -> Path:
    """A Megatron-LM `--optimizer muon` run: Muon's momentum_buffer on the decoder layers'
    linear weights, Adam's states on the embedding, output layer and 1-D parameters
    (megatron/core/optimizer/muon.py), `damage` applied to them."""
    model = tiny_causal_lm("llama", vocab=64)

    def muon(adam: dict) -> dict:
        for name, states in adam["state"].items():
            if ".layers." in name and states["exp_avg"].ndim == 2:
                adam["state"][name] = {"momentum_buffer": torch.zeros_like(states["exp_avg"])}
        damage(adam["state"])
        return adam

    args = megatron_args(model, optimizer="muon")
    return megatron_run(tmp_path, model, args, optimizer=muon)


def test_megatron_lm_muon_is_valid_and_named(tmp_path):
    code, found, kind = _validate(_megatron_muon(tmp_path))
    assert (code, found, kind["name"]) == (0, [], "Adam + Muon")


def test_megatron_lm_muon_damaged_is_invalid(tmp_path):
    fc2 = f"{MCORE}.layers.0.mlp.linear_fc2.weight"

    def damage(states: dict) -> None:
        del states[f"{MCORE}.final_layernorm.weight"]["exp_avg_sq"]
        states[fc2]["momentum_buffer"] = states[fc2]["momentum_buffer"].T.contiguous()

    code, found, _ = _validate(_megatron_muon(tmp_path, damage), "--deep")
    errors = [(where, message) for severity, where, message in found if severity == "error"]
    assert code == 1 and errors == [
        (
            "[model.module.decoder.final_layernorm.weight]",
            "optimizer state exp_avg_sq is missing (no [optimizer.state."
            f"{MCORE}.final_layernorm.weight.exp_avg_sq])",
        ),
        (
            f"[optimizer.state.{fc2}.momentum_buffer]",
            "shape (192, 128) differs from the parameter's (128, 192)",
        ),
    ]


def _adamw(tmp_path: Path, damage) -> Path:
    """A tiny Llama after one AdamW step saved as FSDP2 saves it (no run record names the
    optimizer; its param groups store betas and eps), `damage` applied to the state."""
    model = tiny_causal_lm("llama", vocab=64)
    adamw = optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    model(input_ids=ids, labels=ids).loss.backward()
    adamw.step()
    model_state, optimizer_state = get_state_dict(model, adamw)
    state = {"model": model_state, "optimizer": optimizer_state}
    damage(state)
    return save_dcp(state, tmp_path / "dist_ckpt")


def test_adam_with_every_second_moment_lost_is_invalid_by_its_stored_settings(tmp_path):
    def lose(state: dict) -> None:
        for states in state["optimizer"]["state"].values():
            del states["exp_avg_sq"]

    code, found, _ = _validate(_adamw(tmp_path, lose))
    errors = [message for severity, _, message in found if severity == "error"]
    assert code == 1 and errors == [
        "optimizer state is no known optimizer's (exp_avg, step), not what the stored param"
        " groups' betas and eps (Adam's settings) keeps (Adam's exp_avg, exp_avg_sq): no"
        " parameter holds exp_avg_sq; a resume with that setting cannot load these states"
    ]


def test_an_unknown_sets_parameter_shaped_state_is_held_to_its_shape(tmp_path):
    """A set no optimizer here keeps still holds exp_avg per element of its parameter."""

    def unknown(state: dict) -> None:
        states = state["optimizer"]["state"]
        for each in states.values():
            each["qmap1"] = torch.zeros(4)
        states[UP]["exp_avg"] = states[UP]["exp_avg"].T.contiguous()

    code, found, _ = _validate(_adamw(tmp_path, unknown))
    errors = [(where, message) for severity, where, message in found if severity == "error"]
    assert code == 1 and errors == [
        (
            f"[optimizer.state.{UP}.exp_avg]",
            "shape (128, 192) differs from the parameter's (192, 128)",
        )
    ]


def test_a_weight_lost_while_its_optimizer_state_is_kept_is_an_error(tmp_path):
    down = "model.layers.1.mlp.down_proj.weight"
    code, found, _ = _validate(_adamw(tmp_path, lambda state: state["model"].pop(down)))
    errors = [(where, message) for severity, where, message in found if severity == "error"]
    assert code == 1 and errors == [
        (
            f"[optimizer.state.{down}.exp_avg]",
            f"optimizer state for parameter {down}, which the model does not hold: the"
            " optimizer stepped it, so the weight was lost",
        )
    ]
