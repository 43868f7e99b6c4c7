"""A Megatron-LM torch_dist save converted to fsdp_dtensor whose optimizer state is in a
flat form (dp_reshardable's per-bucket buffers, dp_zero_gather_scatter's pickled object):
validate named it as Megatron's flat-form optimizer state, while inspect said "no optimizer
state", telling the user the resume state was lost. Now inspect finds it as validate does
(one detector) and says it in validate's words, text and --json alike."""

from __future__ import annotations

import json

import pytest

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run
from tests.support.megatron_flat_optimizer_saves import (
    MISFILED,
    PARAM_STATE,
    dp_reshardable_converted,
    dp_zero_gather_scatter_converted,
)

_SAVES = {
    "dp_reshardable": (dp_reshardable_converted, f"{MISFILED}.exp_avg"),
    "dp_zero_gather_scatter": (dp_zero_gather_scatter_converted, PARAM_STATE),
}


@pytest.mark.parametrize("form", list(_SAVES))
def test_inspect_names_the_state_validate_names(tmp_path, form):
    build, first = _SAVES[form]
    run = build(tmp_path, tiny_causal_lm("llama", vocab=64))
    code, stdout, err = run_cli("ckpt", "validate", run, "--json")
    report = json.loads(stdout)
    assert code == 0 and report["has_optimizer_state"] is True, stdout + err
    (finding,) = report["findings"]
    assert finding["where"] == f"[{first}]", finding
    summary = finding["message"].split(":", 1)[0]  # validate's words for the state
    assert summary.startswith(f"Megatron's {form} optimizer state"), finding

    code, stdout, err = run_cli("ckpt", "inspect", run)
    assert code == 0, stdout + err
    (weights,) = [line for line in stdout.splitlines() if line.startswith("weights ")]
    assert "no optimizer state" not in weights, weights
    assert f"{summary}, first [{first}]" in weights, weights

    code, stdout, err = run_cli("ckpt", "inspect", run, "--json")
    described = json.loads(stdout)
    assert code == 0 and described["optimizer_kind"] == report["optimizer_kind"], stdout
    assert described["flat_optimizer"]["form"] == form, described["flat_optimizer"]
    assert described["flat_optimizer"]["summary"] == summary


def test_per_parameter_state_has_no_flat_line(tmp_path):
    model = tiny_causal_lm("llama", vocab=64)
    run = megatron_run(tmp_path, model, megatron_args(model), optimizer=True)
    code, stdout, err = run_cli("ckpt", "inspect", run, "--json")
    described = json.loads(stdout)
    assert code == 0 and described["flat_optimizer"] is None, stdout + err
    assert described["optimizer_kind"]["name"] == "Adam", described["optimizer_kind"]
