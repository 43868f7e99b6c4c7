"""A stepped parameter with no state is said to lack what it lost, never Adam's by default.

Was: a Muon run (Megatron-LM `--optimizer muon`, torch's Muon beside AdamW) whose every
momentum_buffer was lost, Adam's moments on the other parameters kept, read as plain Adam:
validate named each Muon matrix "optimizer state exp_avg is missing" (and exp_avg_sq),
states a Muon matrix never had. Now a record naming Muon (args `optimizer`, the param
groups' `ns_steps`) chains Muon to the states left, and each such matrix lacks Muon's
momentum_buffer; where nothing names the optimizer a matrix beside Adam's states may have
lost Adam's moments or a momentum_buffer, and the error names both, picking neither.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.support.chained_optimizers import stepped_beside_adamw
from tests.support.chained_optimizers import validated as _validate
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

MCORE = "module.module.module.decoder"
QKV = f"{MCORE}.layers.0.self_attention.linear_qkv.weight"
NORM = f"{MCORE}.final_layernorm.weight"
QKV_PARAM = "[model.module.decoder.layers.0.self_attention.linear_qkv.weight]"
NORM_PARAM = "[model.module.decoder.final_layernorm.weight]"


def _megatron_muon(root: Path, optimizer: str | None, lose=(), momentum="kept") -> Path:
    """A Megatron-LM run whose args name `optimizer` (None: name none): Muon's momentum_buffer
    on the decoder layers' linear weights ("kept"), or every one gone ("lost"), or Adam's
    states there too ("none"); Adam's states on the rest; every state of the parameters in
    `lose` gone."""
    model = tiny_causal_lm("llama", vocab=64)

    def muon(adam: dict) -> dict:
        states = adam["state"]
        for name, held in list(states.items()):
            if momentum != "none" and ".layers." in name and held["exp_avg"].ndim == 2:
                states[name] = {"momentum_buffer": torch.zeros_like(held["exp_avg"])}
                if momentum == "lost":
                    del states[name]
        for name in lose:
            states.pop(name)
        return adam

    args = megatron_args(model, **({} if optimizer is None else {"optimizer": optimizer}))
    return megatron_run(root, model, args, optimizer=muon)


def _errors(found: list) -> list:
    return [(where, message) for severity, where, message in found if severity == "error"]


def test_muon_whose_every_momentum_is_lost_lacks_momentum_buffer(tmp_path):
    code, found, kind = _validate(_megatron_muon(tmp_path, "muon", momentum="lost"))
    errors = _errors(found)
    assert code == 1 and kind["name"] == "Adam + Muon"
    assert errors[0] == (
        QKV_PARAM,
        f"optimizer state momentum_buffer is missing (no [optimizer.state.{QKV}.momentum_buffer])",
    )
    assert len(errors) == 10  # each decoder linear weight (fc1 in halves), once
    assert all("momentum_buffer is missing" in message for _, message in errors)
    assert not any("exp_avg" in message for _, message in errors)


def test_a_lost_vector_beside_muon_lacks_adams_moments(tmp_path):
    """Muon steps matrices only: a norm without state lost Adam's, named as such."""
    code, found, _ = _validate(_megatron_muon(tmp_path, "muon", lose=[NORM]))
    assert code == 1 and _errors(found) == [
        (NORM_PARAM, f"optimizer state {state} is missing (no [optimizer.state.{NORM}.{state}])")
        for state in ("exp_avg", "exp_avg_sq")
    ]


def test_a_matrix_lost_where_nothing_names_the_optimizer_names_both_sets(tmp_path):
    """args without `optimizer`, momentum lost everywhere: Adam's moments or a momentum_buffer
    (SGD's or Muon's) may be what each matrix lost, and the error says both."""
    code, found, kind = _validate(_megatron_muon(tmp_path, None, momentum="lost"))
    errors = _errors(found)
    assert code == 1 and kind["name"] == "Adam" and len(errors) == 10
    assert errors[0] == (
        QKV_PARAM,
        "optimizer state is missing: it lacks either Adam's exp_avg and exp_avg_sq, or momentum"
        " (SGD or Muon)'s momentum_buffer; nothing tells which optimizer stepped it (no"
        f" [optimizer.state.{QKV}.exp_avg], [optimizer.state.{QKV}.momentum_buffer])",
    )


def test_a_matrix_lost_beside_kept_momentum_names_both_sets(tmp_path):
    """Muon's momentum kept on the other matrices: a matrix without state may have been
    Muon's or Adam's (an embedding's is Adam's), so both are named."""
    code, found, kind = _validate(_megatron_muon(tmp_path, "muon", lose=[QKV]))
    assert (code, kind["name"]) == (1, "Adam + Muon")
    assert _errors(found) == [
        (
            QKV_PARAM,
            "optimizer state is missing: it lacks either Adam's exp_avg and exp_avg_sq, or"
            " Muon's momentum_buffer; nothing tells which optimizer stepped it (no"
            f" [optimizer.state.{QKV}.exp_avg], [optimizer.state.{QKV}.momentum_buffer])",
        )
    ]


def test_a_matrix_lost_from_a_recorded_adam_run_lacks_adams_moments(tmp_path):
    """args naming adam tell: the lost matrix lacks Adam's moments, as before."""
    code, found, _ = _validate(_megatron_muon(tmp_path, "adam", lose=[QKV], momentum="none"))
    errors = [e for e in _errors(found) if e[0] == QKV_PARAM]
    assert code == 1 and errors == [
        (QKV_PARAM, f"optimizer state {state} is missing (no [optimizer.state.{QKV}.{state}])")
        for state in ("exp_avg", "exp_avg_sq")
    ]


def test_torch_muon_whose_momentum_is_lost_is_named_by_its_ns_steps(tmp_path):
    """torch's Muon beside AdamW, every momentum_buffer lost: the param groups' ns_steps
    name Muon, so the states left are Adam + Muon's, not plain Adam's."""

    def lose_momentum(optimizer_state: dict) -> None:
        for states in optimizer_state["state"].values():
            states.pop("momentum_buffer", None)

    ckpt = stepped_beside_adamw(tmp_path, lose_momentum)
    code, out, _ = run_cli("ckpt", "inspect", ckpt, "--json")
    assert code == 0 and json.loads(out)["optimizer_kind"]["name"] == "Adam + Muon"
