"""A parameter that lost its whole optimizer state is an error wherever Megatron's
`param_to_group_meta` records it, under whichever name Megatron-LM gives the record.

Megatron-LM's fsdp_dtensor save splits a SwiGLU fc1 into `weight_w` / `weight_v` halves
(TEGroupedMLP's experts: `weight<E>_w` / `_v`) and stores an MTP layer's inner layer as
`transformer_layer` in the model and in `optimizer.state` only; `param_to_group_meta` keeps
the optimizer's names, fc1 unsplit and `mtp_model_layer`. Was: the record was looked up
under the stored name, never found for those, so an fc1 half (dense or expert) or an MTP
weight without any state was only "no optimizer state ... frozen, or never stepped" (exit
0), while a `linear_proj` without state was an error. The checkpoints here hold the record
as Megatron-LM writes it (tests/support/megatron_checkpoints.py `adam_state`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

WRAPPERS = "module.module.module."
# (family, MTP layers, the parameter whose whole state is lost, as stored in the model)
LOST = {
    "attention": ("llama", 0, "decoder.layers.0.self_attention.linear_proj.weight"),
    "dense fc1 gate": ("llama", 0, "decoder.layers.0.mlp.linear_fc1.weight_w"),
    "dense fc1 up": ("llama", 0, "decoder.layers.1.mlp.linear_fc1.weight_v"),
    "expert fc1": ("qwen3_moe", 0, "decoder.layers.0.mlp.experts.linear_fc1.weight1_v"),
    "MTP fc1": ("llama", 1, "mtp.layers.0.transformer_layer.mlp.linear_fc1.weight_w"),
    "MTP attention": (
        "llama",
        1,
        "mtp.layers.0.transformer_layer.self_attention.linear_proj.weight",
    ),
}


def _run_without_state(root: Path, family: str, mtp_layers: int, lost: str) -> Path:
    """A Megatron-LM run with Adam state and `param_to_group_meta` for every parameter,
    `lost`'s whole state gone; its record (under Megatron-LM's name) left."""
    model = tiny_causal_lm(family, vocab=64)

    def drop(adam: dict) -> dict:
        recorded = adam["param_to_group_meta"]
        assert WRAPPERS + lost not in recorded or lost.endswith("linear_proj.weight")
        del adam["state"][WRAPPERS + lost]
        return adam

    # args name adam, as Megatron-LM's always name the optimizer: without a record, a
    # matrix without state may have lost Adam's moments or a momentum_buffer
    mtp = {"mtp_num_layers": mtp_layers} if mtp_layers else {}
    args = megatron_args(model, optimizer="adam", **mtp)
    return megatron_run(root, model, args, optimizer=drop, mtp_layers=mtp_layers)


@pytest.mark.parametrize("case", list(LOST))
def test_a_parameter_without_state_that_the_record_names_is_an_error(case, tmp_path):
    family, mtp_layers, lost = LOST[case]
    run = _run_without_state(tmp_path, family, mtp_layers, lost)
    code, stdout, err = run_cli("ckpt", "validate", run, "--json")
    findings = json.loads(stdout)["findings"]
    errors = sorted((f["where"], f["message"]) for f in findings if f["severity"] == "error")
    assert code == 1, stdout + err
    assert errors == [
        (
            f"[model.module.{lost}]",
            f"optimizer state {state} is missing (no [optimizer.state.{WRAPPERS}{lost}.{state}])",
        )
        for state in ("exp_avg", "exp_avg_sq")
    ], findings
    assert not [f for f in findings if "frozen" in f["message"]], findings


def test_the_whole_state_lost_names_an_fc1_halfs_key(tmp_path):
    """Every state gone, the first parameter an fc1 half: the one error names the key its
    first state would be stored under, the split name, from the unsplit record."""
    model = tiny_causal_lm("llama", vocab=64)

    def only_fc1_first(adam: dict) -> dict:
        meta = adam["param_to_group_meta"]
        first = next(key for key in meta if key.endswith("linear_fc1.weight"))
        return {"state": {}, "param_to_group_meta": {first: meta[first]}}

    run = megatron_run(tmp_path, model, megatron_args(model), optimizer=only_fc1_first)
    code, stdout, err = run_cli("ckpt", "validate", run, "--json")
    errors = [f for f in json.loads(stdout)["findings"] if f["severity"] == "error"]
    stored = "decoder.layers.0.mlp.linear_fc1.weight_w"
    assert code == 1 and len(errors) == 1, stdout + err
    assert errors[0]["where"] == f"[model.module.{stored}]", errors
    assert "no optimizer state for the 2 parameters param_to_group_meta" in errors[0]["message"]
    assert f"(first: no [optimizer.state.{WRAPPERS}{stored}.exp_avg];" in errors[0]["message"]
