"""`mfsdp train` on a run dir whose newest step is the run's last is checked as every
resume is before it says "nothing left to train": the step's files against its manifest,
the data position, the model config. A launcher-side shortcut once said "nothing left"
(exit 0, the step named as the run's checkpoint) over a corrupted step and over a batch
size that maps the steps to other rows, both refused by a resume.

The nothing-left line names the key the user sets: `trainer.epochs` where the epochs
decide the steps (it named a `trainer.total_steps` the user never set)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.fresh_python import mfsdp
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl

ROWS, BATCH = 16, 8  # one epoch of 2 steps


def _train(data: Path, run: Path, *overrides: str):
    # the epoch decides the steps unless `overrides` set them (a key is given once)
    steps = "trainer.total_steps"
    unset = [] if any(o.startswith(f"{steps}=") for o in overrides) else [f"{steps}=null"]
    return mfsdp(
        "train",
        "sft",
        "--config",
        str(EXAMPLES / "sft_tiny_cpu.yaml"),
        "--json",
        f"data.train_files={data}",
        "data.val_ratio=0",
        f"data.global_batch_size={BATCH}",
        *unset,
        "trainer.epochs=1",
        "checkpoint.save_every=1",
        f"trainer.run_dir={run}",
        "trainer.progress_bar=false",
        *overrides,
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """A run trained to its last step (2, by its epoch), and its data."""
    root = tmp_path_factory.mktemp("finished")
    data = write_chat_jsonl(root / "train.jsonl", rows=ROWS)
    done = _train(data, root / "run")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_step"] == ROWS // BATCH
    return data, root / "run"


def _copy(finished: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    data, run = finished
    shutil.copytree(run, tmp_path / "run")
    return data, tmp_path / "run"


def test_a_finished_run_by_its_epochs_names_the_epochs_to_raise(finished, tmp_path):
    data, run = _copy(finished, tmp_path)
    done = _train(data, run)
    assert done.returncode == 0, done.stderr
    assert "nothing left to train (raise trainer.epochs to train on" in done.stderr
    assert "trainer.epochs=1" in done.stderr and "trainer.total_steps=" not in done.stderr


def test_a_finished_run_with_another_batch_size_is_refused_as_a_resume(finished, tmp_path):
    data, run = _copy(finished, tmp_path)
    smaller = f"data.global_batch_size={BATCH // 2}"
    done = _train(data, run, smaller, f"trainer.total_steps={ROWS // BATCH}")
    assert done.returncode == 2, done.stderr
    assert f"data.global_batch_size={BATCH}" in done.stderr
    assert "nothing left to train" not in done.stderr


def test_a_finished_run_whose_last_step_is_damaged_is_refused_naming_the_file(finished, tmp_path):
    data, run = _copy(finished, tmp_path)
    last = run / f"global_step_{ROWS // BATCH}" / "dist_ckpt"
    damaged = sorted(last.glob("*.distcp"))[0]
    raw = bytearray(damaged.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    done = _train(data, run, f"trainer.total_steps={ROWS // BATCH}")
    assert done.returncode == 1, done.stderr
    assert damaged.name in done.stderr and "nothing left to train" not in done.stderr
