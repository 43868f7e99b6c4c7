"""Megatron's distributed optimizer keeps each parameter's fp32 main weight, `param`, beside
Adam's moments: what Megatron-LM's checkpoint_inspector.py convert-torch-dist-to-fsdp-dtensor
writes (`optimizer.state.module.module.module.<param>.{param, exp_avg, exp_avg_sq}`, the
step in `optimizer.param_groups`), the converter mfsdp's torch_dist refusal points at.

Was: "optimizer states exp_avg, exp_avg_sq, param are no known optimizer's set ...: their
completeness is not checked" (a warning, so --strict failed the converter's own output),
and inspect's "no known optimizer's (exp_avg, exp_avg_sq, param)". Now it is Adam, held
to Adam's set: a lost moment is an error naming it, and `param` is held to its weight's
shape.
"""

from __future__ import annotations

import json

import torch

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

PARAM = "module.module.module.embedding.word_embeddings.weight"
EMBEDDING = f"optimizer.state.{PARAM}"


def _converted(states: dict) -> dict:
    """The converter's per-parameter state: main weight, moments; no per-parameter step."""
    return {
        "param": torch.full_like(states["exp_avg"], 0.5, dtype=torch.float32),
        "exp_avg": states["exp_avg"],
        "exp_avg_sq": states["exp_avg_sq"],
    }


def _run(tmp_path, change=lambda state: None):
    model = tiny_causal_lm("llama", vocab=64)

    def optimizer(adam: dict) -> dict:
        state = {key: _converted(states) for key, states in adam["state"].items()}
        change(state)
        return {"state": state, "param_groups": {"0": {"step": 100, "lr": 1e-5}}}

    return megatron_run(tmp_path, model, megatron_args(model), optimizer=optimizer)


def test_the_converters_output_is_adam_and_passes_strict(tmp_path):
    run = _run(tmp_path)
    code, stdout, err = run_cli("ckpt", "validate", run, "--deep")
    assert code == 0 and "Adam optimizer state" in stdout, stdout + err
    assert "warning:" not in stdout + err, stdout + err
    code, stdout, err = run_cli("ckpt", "inspect", run)
    (line,) = [line for line in stdout.splitlines() if line.startswith("weights ")]
    assert line.endswith(": Adam (exp_avg, exp_avg_sq, param)"), line


def test_a_lost_moment_beside_param_is_an_error_naming_it(tmp_path):
    run = _run(tmp_path, lambda state: state[PARAM].pop("exp_avg_sq"))
    code, stdout, _ = run_cli("ckpt", "validate", run, "--json")
    findings = [(f["where"], f["message"]) for f in json.loads(stdout)["findings"]]
    assert code == 1 and findings == [
        (
            "[model.module.embedding.word_embeddings.weight]",
            f"optimizer state exp_avg_sq is missing (no [{EMBEDDING}.exp_avg_sq])",
        )
    ], findings


def test_a_main_weight_of_another_shape_is_an_error(tmp_path):
    run = _run(tmp_path, lambda state: state[PARAM].update(param=torch.zeros(3, 3)))
    code, stdout, _ = run_cli("ckpt", "validate", run, "--json")
    findings = json.loads(stdout)["findings"]
    assert code == 1 and len(findings) == 1, findings
    assert f"{EMBEDDING}.param" in findings[0]["where"] + findings[0]["message"], findings
