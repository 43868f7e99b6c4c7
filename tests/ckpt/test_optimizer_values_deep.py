"""validate --deep of a checkpoint without a manifest refuses optimizer state no optimizer
writes: a negative second moment (Adam's exp_avg_sq, AMSGrad's max_exp_avg_sq) or a step
count below 0 or between whole numbers, naming the key, exit 1. Was: valid, exit 0 (only
NaN and Inf were read for); a resume loaded it and Adam's update took the square root of
a negative moment. With a manifest its digests catch any change to the bytes.

Each checkpoint is a real torch optimizer's state after one step on a tiny Llama, saved as
FSDP2 saves it (`test_optimizer_kinds`); the real Megatron checkpoints among the fixtures
validate as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.format import layout
from tests.ckpt.test_optimizer_kinds import LOST_FROM, OPTIMIZERS, _stepped
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp
from tests.support.paths import FIXTURES

STATE_KEY = f"optimizer.state.{LOST_FROM}"


def _validate_deep(root: Path, model, optimizer_state: dict) -> tuple[int, list]:
    """validate --deep's exit code and (severity, where, message) findings of the state
    saved as a DCP without a manifest, with `model`'s config beside it."""
    state = {"model": model.state_dict(), "optimizer": optimizer_state}
    ckpt = save_dcp(state, root / "dist_ckpt")
    model.config.save_pretrained(root / "huggingface")
    code, out, _ = run_cli("ckpt", "validate", ckpt, "--deep", "--json")
    return code, [(f["severity"], f["where"], f["message"]) for f in json.loads(out)["findings"]]


def _set(state: torch.Tensor, value: float) -> None:
    state.view(-1)[0] = value


NEGATIVE = "(a mean of squared gradients, which no optimizer stores below 0)"
STEPS = "(an optimizer counts whole steps from 0)"


@pytest.mark.parametrize(
    "make, state, value, message",
    [
        (OPTIMIZERS["adamw"][0], "exp_avg_sq", -1e-12, f"1 negative value {NEGATIVE}"),
        (OPTIMIZERS["adam_amsgrad"][0], "max_exp_avg_sq", -3.0, f"1 negative value {NEGATIVE}"),
        (OPTIMIZERS["adamw"][0], "step", -1.0, f"step count -1 {STEPS}"),
        (OPTIMIZERS["adamw"][0], "step", 2.5, f"step count 2.5 {STEPS}"),
    ],
    ids=["exp_avg_sq_negative", "max_exp_avg_sq_negative", "step_negative", "step_not_whole"],
)
def test_optimizer_state_no_optimizer_writes_is_an_error_naming_its_key(
    tmp_path, make, state, value, message
):
    model, _, optimizer_state = _stepped(make)
    _set(optimizer_state["state"][LOST_FROM][state], value)
    assert _validate_deep(tmp_path, model, optimizer_state) == (
        1,
        [("error", f"[{STATE_KEY}.{state}]", message)],
    )


def test_every_negative_value_of_a_moment_is_counted(tmp_path):
    model, _, optimizer_state = _stepped(OPTIMIZERS["adamw"][0])
    moment = optimizer_state["state"][LOST_FROM]["exp_avg_sq"]
    moment.view(-1)[:5] = -moment.view(-1)[:5] - 1e-9
    code, findings = _validate_deep(tmp_path, model, optimizer_state)
    assert (code, findings) == (
        1,
        [("error", f"[{STATE_KEY}.exp_avg_sq]", f"5 negative values {NEGATIVE}")],
    )


@pytest.mark.parametrize("state, value", [("exp_avg", float("nan")), ("exp_avg_sq", float("inf"))])
def test_nan_and_inf_in_a_moment_are_errors_naming_its_key(tmp_path, state, value):
    model, _, optimizer_state = _stepped(OPTIMIZERS["adamw"][0])
    _set(optimizer_state["state"][LOST_FROM][state], value)
    nan, inf = (1, 0) if value != value else (0, 1)
    assert _validate_deep(tmp_path, model, optimizer_state) == (
        1,
        [("error", f"[{STATE_KEY}.{state}]", f"{nan} NaN and {inf} Inf values")],
    )


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_healthy_states_of_every_known_optimizer_pass_the_deep_read(name, tmp_path):
    model, _, optimizer_state = _stepped(OPTIMIZERS[name][0])
    assert _validate_deep(tmp_path, model, optimizer_state) == (0, [])


MEGATRON_RUNS = sorted((FIXTURES / "mcore_optim").glob("*/run"))


@pytest.mark.parametrize("run", MEGATRON_RUNS, ids=[run.parent.name for run in MEGATRON_RUNS])
def test_megatron_lm_distributed_optimizer_state_passes(run):
    code, out, err = run_cli(
        "ckpt", "validate", run, "--deep", "--json", "--hf-config", run.parent / "config.json"
    )
    assert code == 0 and json.loads(out)["findings"] == [], out + err


def test_megatron_fsdp_state_without_its_manifest_passes(tmp_path):
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", tmp_path / "run")
    step = layout.step_dir(run, 2)
    (step / layout.MANIFEST_FILE).unlink()
    code, out, _ = run_cli("ckpt", "validate", step / layout.DIST_CKPT_DIR, "--deep", "--json")
    report = json.loads(out)
    assert code == 0 and [f for f in report["findings"] if f["severity"] == "error"] == [], out
