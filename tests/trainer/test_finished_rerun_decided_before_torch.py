"""A rerun of a finished SFT run (the same command again) says there is nothing left to train
and reports as before, without importing torch: it loaded torch and transformers, read the
data and built the model first. Where the config or the run dir alone cannot decide it (a
changed setting, epochs that count the rows, another kind of run, no automatic resume), the
full start-up decides, as before."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO, repo_env
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import SFTConfig, load_config
from trainer.finished_rerun import finished_rerun
from trainer.sft import run_sft

STEPS = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finished")
    data = write_chat_jsonl(root / "train.jsonl", rows=16)
    run_sft(tiny_config(data, root / "run", f"trainer.total_steps={STEPS}"))
    return root / "run"


def _config(run: Path, *overrides: str) -> SFTConfig:
    return load_config(SFTConfig, run / "config.yaml", list(overrides))


def _copy(run: Path, tmp_path: Path) -> Path:
    """A copy of the finished run (data and run dir), its config.yaml naming the copies."""
    copied = Path(shutil.copytree(run.parent, tmp_path / "copy"))
    config = copied / "run" / "config.yaml"
    config.write_text(config.read_text().replace(str(run.parent), str(copied)))
    return copied / "run"


def test_the_rerun_reports_without_importing_torch(run):
    command = [sys.executable, "-X", "importtime", "-m", "cli.train", "sft", "--json"]
    done = subprocess.run(
        [*command, "--config", str(run / "config.yaml")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=repo_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "torch" not in imported and "transformers" not in imported
    step = run / f"global_step_{STEPS}"
    assert f"[sft] {step} is at step {STEPS} and trainer.total_steps={STEPS}: nothing left to" in (
        done.stderr
    )
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    loss = [r["train/loss"] for r in logged if "train/loss" in r][-1]
    assert summary == {
        "run_dir": str(run),
        "final_step": STEPS,
        "total_steps": STEPS,
        "stopped_early": False,
        "resumed_from": STEPS,
        "final_loss": loss,
        "val_loss": None,
        "checkpoint": str(step),
    }


def test_the_same_config_of_this_kind_is_decided_here(run):
    finished = finished_rerun(_config(run), "sft")
    assert finished is not None and finished.final_step == STEPS
    assert finished.last_checkpoint == run / f"global_step_{STEPS}"


@pytest.mark.parametrize(
    "overrides, kind",
    [
        (("trainer.log_every=3",), "sft"),  # a changed setting: the full start-up compares it
        (("trainer.total_steps=null",), "sft"),  # the epochs decide: they count the rows
        (("trainer.steps_within_epochs=true",), "sft"),
        (("checkpoint.resume=disable",), "sft"),  # a fresh start trains
        ((), "grpo"),  # another kind of run wrote it: the full start-up refuses it
    ],
)
def test_what_the_config_and_run_dir_cannot_decide_goes_the_full_way(run, overrides, kind):
    assert finished_rerun(_config(run, *overrides), kind) is None


def test_a_damaged_step_goes_the_full_way(run, tmp_path):
    copied = _copy(run, tmp_path)
    assert finished_rerun(_config(copied), "sft") is not None
    shard = sorted((copied / f"global_step_{STEPS}" / "dist_ckpt").glob("*.distcp"))[0]
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    assert finished_rerun(_config(copied), "sft") is None


def test_data_changed_since_the_step_goes_the_full_way(run, tmp_path):
    copied = _copy(run, tmp_path)
    assert finished_rerun(_config(copied), "sft") is not None
    data = copied.parent / "train.jsonl"
    saved = (copied / f"global_step_{STEPS}" / "manifest.json").stat().st_mtime
    os.utime(data, (saved + 10, saved + 10))
    assert finished_rerun(_config(copied), "sft") is None
