"""Optimizer state that is not keyed by parameter name, as other tools save it.

- torch's own `Optimizer.state_dict()` keys each state by position (`optim.state.0.exp_avg`):
  plain `dcp.save({"model": msd, "optim": opt.state_dict()})`, and Megatron-LM's torch_dcp
  format (megatron/training/checkpointing.py saves `optimizer.state_dict()`; its
  FP32Optimizer returns torch's, Float16OptimizerWithFloat16Params nests it under
  `optimizer`: `optimizer.optimizer.state.0.exp_avg`). Was: a "missing" error per weight
  (exit 1), or "no optimizer state" for the nested one.
- Megatron-core's ChainedOptimizer saves one state dict per model chunk under its index
  (`optimizer.0.state.module.module.module.<param>.exp_avg`). Was: "no optimizer state".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.format.state_keys import state_prefixes, state_roots
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import (
    adam_state,
    mcore_weights,
    megatron_args,
    save_dcp,
)


def _stepped(model) -> torch.optim.Optimizer:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.arange(12).reshape(2, 6) % model.config.vocab_size
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    return optimizer


def _validate(path: Path) -> tuple[int, dict]:
    code, out, err = run_cli("ckpt", "validate", path, "--json")
    assert out, err
    return code, json.loads(out)


def _messages(report: dict, severity: str) -> list[str]:
    return [
        f"{f['where']}: {f['message']}" for f in report["findings"] if f["severity"] == severity
    ]


@pytest.mark.parametrize("nesting", ["optim", "optimizer.optimizer"])
def test_states_keyed_by_position_are_optimizer_state_checked_by_shape(nesting, tmp_path):
    model = tiny_causal_lm("qwen2")
    optimizer_state = _stepped(model).state_dict()
    entry, _, inner = nesting.partition(".")
    saved = {inner: optimizer_state} if inner else optimizer_state
    dcp = save_dcp({"model": model.state_dict(), entry: saved}, tmp_path / "dist_ckpt")
    model.config.save_pretrained(tmp_path / "huggingface")
    code, report = _validate(dcp)
    assert code == 0 and report["has_optimizer_state"], report
    assert _messages(report, "error") == []
    (warning,) = _messages(report, "warning")
    count = len(list(model.parameters()))
    assert f"optimizer state of {count} parameters keyed by position" in warning
    code, out, _ = run_cli("ckpt", "inspect", dcp, "--json")
    assert json.loads(out)["weights"]["optimizer_state_tensors"] == 3 * count  # step + moments


def test_a_positional_state_lacking_a_moment_or_of_no_parameters_shape_is_an_error(tmp_path):
    model = tiny_causal_lm("llama")
    state = _stepped(model).state_dict()
    del state["state"][1]["exp_avg_sq"]
    state["state"][2]["exp_avg"] = torch.zeros(3, 5)
    state["state"][len(state["state"])] = {"exp_avg": torch.zeros(1), "exp_avg_sq": torch.zeros(1)}
    dcp = save_dcp({"model": model.state_dict(), "optim": state}, tmp_path / "dist_ckpt")
    model.config.save_pretrained(tmp_path / "huggingface")
    code, report = _validate(dcp)
    errors = _messages(report, "error")
    assert code == 1 and len(errors) == 5, errors
    assert "[optim.state.1.step]: optimizer state exp_avg_sq is missing" in errors[0]
    assert "[optim.state.2.exp_avg]: shape (3, 5) is no model parameter's" in errors[1]
    count = len(list(model.parameters()))
    assert f"[optim.state.{count}.exp_avg_sq]: shape (1,) is no model" in errors[3]
    assert f"{count + 1} parameters' optimizer states for the model's {count}" in errors[4]


def test_a_chained_optimizers_states_under_chunk_indices_pair_by_name(tmp_path):
    model = tiny_causal_lm("qwen2")
    weights = mcore_weights(model)
    adam = adam_state(weights)
    state = {"args": megatron_args(model), "iteration": 100, "model": weights}
    dcp = save_dcp({**state, "optimizer": {"0": adam}}, tmp_path / "whole" / "iter_0000100")
    code, report = _validate(dcp)
    assert code == 0 and report["has_optimizer_state"], report
    assert _messages(report, "error") == [] and _messages(report, "warning") == []
    param = next(iter(adam["state"]))
    del adam["state"][param]["exp_avg_sq"]
    dcp = save_dcp({**state, "optimizer": {"0": adam}}, tmp_path / "damaged" / "iter_0000100")
    code, report = _validate(dcp)
    (error,) = _messages(report, "error")
    assert code == 1 and f"exp_avg_sq is missing (no [optimizer.0.state.{param}" in error, error


def test_state_prefixes_follow_the_nesting_optimizers_use():
    keys = [
        "optimizer.state.module.decoder.w.exp_avg",
        "optimizer.optimizer.state.0.exp_avg",
        "optimizer.fp32_from_fp16_params.0.0",
        "optimizer.0.state.module.decoder.w.exp_avg",
        "optimizer.1.state.module.decoder.w.exp_avg",
        "optimizer.param_groups.0.lr",
        "optimizer.a.state.x.exp_avg",  # a named level is no nesting of a known optimizer
        "optim.state.0.exp_avg",
    ]
    assert state_prefixes("optimizer", keys) == (
        "optimizer.state.",
        "optimizer.optimizer.state.",
        "optimizer.0.state.",
        "optimizer.1.state.",
    )
    roots = state_roots(["model.decoder.w", *keys[:5]])
    assert roots.state_path("optimizer.1.state.module.decoder.w.exp_avg") == (
        "module.decoder.w.exp_avg"
    )
    assert roots.state_path("optimizer.fp32_from_fp16_params.0.0") is None
