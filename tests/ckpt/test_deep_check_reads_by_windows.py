"""validate --deep reads each stored chunk a bounded window at a time (`WINDOW_BYTES`,
through export --verify's piece reader), checks each window and tells its progress in bytes
as each is read. Was: each tensor read whole (2.5 GiB of memory for a 2 GiB tensor, where
export --verify read the same bytes in 459 MiB), and progress counted tensors, so one
tensor of gigabytes or of 200,000 chunks showed nothing for minutes.

The window is set small here so that a tensor of a few hundred KB spans several; the
memory bound itself is measured at full size in test_deep_reads_one_tensor_at_a_time.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mfsdp_ckpt.check import storage_checks
from mfsdp_ckpt.check.validate import validate_checkpoint

WINDOW = 64 << 10
ELEMENTS = WINDOW // 4 * 5 // 2  # float32: two windows and a half


@pytest.fixture(autouse=True)
def _small_windows(monkeypatch):
    monkeypatch.setattr(storage_checks, "WINDOW_BYTES", WINDOW)


def _save(run: Path, tensors: dict) -> Path:
    from mfsdp_ckpt.checkpointer import Checkpointer

    Checkpointer(run, strategy="none").save(1, {"model": tensors}, contents=("model",))
    return run


def _errors(report) -> list[tuple[str, str]]:
    return [(f.where, f.message) for f in report.findings if f.severity == "error"]


def test_a_nan_in_the_last_window_and_an_inf_in_the_first_are_both_counted(tmp_path):
    import torch

    values = torch.full((ELEMENTS,), 0.5)
    values[0], values[-1] = math.inf, math.nan
    run = _save(tmp_path / "run", {"w": values, "b": torch.ones(4)})
    report = validate_checkpoint(run, deep=True)
    assert _errors(report) == [("[model.w]", "1 NaN and 1 Inf values")]


def test_a_nan_in_the_last_window_of_a_two_dimensional_bf16_tensor(tmp_path):
    import torch

    values = torch.full((ELEMENTS // 64, 128), 0.5, dtype=torch.bfloat16)  # 2.5 windows
    values[-1, -1] = math.nan
    report = validate_checkpoint(_save(tmp_path / "run", {"w": values}), deep=True)
    assert _errors(report) == [("[model.w]", "1 NaN and 0 Inf values")]


def test_progress_counts_the_bytes_read_within_a_tensor(tmp_path):
    import torch

    run = _save(tmp_path / "run", {"w": torch.full((ELEMENTS,), 0.5), "b": torch.ones(4)})
    calls: list[tuple[int, int]] = []
    report = validate_checkpoint(run, deep=True, progress=lambda *call: calls.append(call))
    assert report.ok(strict=False)
    total = ELEMENTS * 4 + 16
    assert calls[-1] == (total, total)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    # told as the large tensor's windows are read, not once it is done
    within = {done for done, _ in calls if 0 < done < ELEMENTS * 4}
    assert len(within - {16}) >= 2, calls


def test_the_optimizer_checks_count_over_every_window_of_a_state(tmp_path, monkeypatch):
    """Without a manifest, the optimizer's value checks run on the same windows as the
    NaN/Inf count: negative second moments in the first and last window of one state are
    one finding counting both, as read whole."""
    from mfsdp_ckpt.check.validate import validate_paths
    from mfsdp_ckpt.format import checkpoint_resolution
    from tests.ckpt.test_optimizer_kinds import OPTIMIZERS, _stepped
    from tests.support.megatron_checkpoints import save_dcp

    model, _, optimizer_state = _stepped(OPTIMIZERS["adamw"][0])
    states = optimizer_state["state"]
    name = max(states, key=lambda key: states[key]["exp_avg_sq"].numel())
    moment = states[name]["exp_avg_sq"].view(-1)
    moment[0] = moment[-1] = -1.0
    window = moment.numel() * 4 // 3  # float32: three windows and a bit
    monkeypatch.setattr(storage_checks, "WINDOW_BYTES", window)
    monkeypatch.setattr(storage_checks, "SMALL_BLOB_BYTES", window // 2)  # read by windows
    target = save_dcp(
        {"model": model.state_dict(), "optimizer": optimizer_state}, tmp_path / "dist_ckpt"
    )
    model.config.save_pretrained(tmp_path / "huggingface")
    report = validate_paths(checkpoint_resolution.resolve_checkpoint(target), deep=True)
    assert _errors(report) == [
        (
            f"[optimizer.state.{name}.exp_avg_sq]",
            "2 negative values (a mean of squared gradients, which no optimizer stores below 0)",
        )
    ]
