"""Megatron-LM's torch_dist saves in the `fully_sharded_model_space` format (the default
fully-parallel save from June 2024 to December 2025) name each parameter's fp32 main weight
`fp32_param` (distrib_optimizer.py `sharded_param_state_fs_model_space`), beside Adam's
moments or Lion's `exp_avg`, and no per-parameter step. checkpoint_inspector.py
convert-torch-dist-to-fsdp-dtensor keeps the names: `optimizer.state.module.module.module.
<param>.{fp32_param, exp_avg, exp_avg_sq}`.

Was: "optimizer states exp_avg, exp_avg_sq, fp32_param are no known optimizer's set ...:
their completeness is not checked" (a lost moment passed validate, exit 0; the warning
stood on every such checkpoint). Now it is Adam (or Lion), held to that optimizer's set, the main
weight to its parameter's shape, as `param` (the `fully_reshardable` format's name) is.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

PARAM = "module.module.module.decoder.layers.0.self_attention.linear_qkv.weight"
STATE = f"optimizer.state.{PARAM}"
MOMENTS = {"Adam": ("exp_avg", "exp_avg_sq"), "Lion": ("exp_avg",)}


def _run(tmp_path, optimizer: str = "Adam", change=lambda state: None):
    """A converted fully_sharded_model_space save: per parameter the main weight as
    `fp32_param` and `optimizer`'s moments, the step in param_groups."""
    model = tiny_causal_lm("llama", vocab=64)

    def converted(adam: dict) -> dict:
        state = {
            key: {
                "fp32_param": torch.full_like(states["exp_avg"], 0.5, dtype=torch.float32),
                **{moment: states[moment] for moment in MOMENTS[optimizer]},
            }
            for key, states in adam["state"].items()
        }
        change(state)
        return {"state": state, "param_groups": {"0": {"step": 100, "lr": 1e-5}}}

    args = megatron_args(model, optimizer=optimizer.lower())
    return megatron_run(tmp_path, model, args, optimizer=converted)


@pytest.mark.parametrize("optimizer", list(MOMENTS))
def test_the_converted_save_is_its_optimizers_without_a_warning(optimizer, tmp_path):
    run = _run(tmp_path, optimizer)
    code, stdout, err = run_cli("ckpt", "validate", run, "--deep")
    assert code == 0 and f"{optimizer} optimizer state" in stdout, stdout + err
    assert "warning:" not in stdout + err, stdout + err
    code, stdout, err = run_cli("ckpt", "inspect", run)
    (line,) = [line for line in stdout.splitlines() if line.startswith("weights ")]
    held = ", ".join(sorted((*MOMENTS[optimizer], "fp32_param")))
    assert line.endswith(f": {optimizer} ({held})"), line


def test_a_lost_moment_beside_fp32_param_is_an_error_naming_it(tmp_path):
    run = _run(tmp_path, change=lambda state: state[PARAM].pop("exp_avg_sq"))
    code, stdout, _ = run_cli("ckpt", "validate", run, "--json")
    findings = [(f["where"], f["message"]) for f in json.loads(stdout)["findings"]]
    assert code == 1 and findings == [
        (
            f"[model.{PARAM.removeprefix('module.module.')}]",
            f"optimizer state exp_avg_sq is missing (no [{STATE}.exp_avg_sq])",
        )
    ], findings


def test_an_fp32_param_of_another_shape_is_an_error(tmp_path):
    run = _run(tmp_path, change=lambda state: state[PARAM].update(fp32_param=torch.zeros(3, 3)))
    code, stdout, _ = run_cli("ckpt", "validate", run, "--json")
    findings = json.loads(stdout)["findings"]
    assert code == 1 and len(findings) == 1, findings
    assert findings[0]["where"] == f"[{STATE}.fp32_param]", findings
    assert findings[0]["message"].startswith("shape (3, 3) differs"), findings
