"""`checkpoint.keep_last` removes an old step crash-safely: the step is renamed out of the
step names (`.global_step_N.removing-<pid>`) before it is deleted. A SIGKILL partway through
the delete left a `global_step_N` without manifest that no prune counted and no command
named; now a kill leaves a hidden leftover that validate names and the next save removes,
and a manifest-less step dir such a kill left before is removed too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from mfsdp_ckpt.check.report import WARNING
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout, run_steps
from mfsdp_ckpt.kill_points import KILL_AT_ENV

REPO = Path(__file__).resolve().parents[2]


def save(run: Path, step: int, keep_last: int | None = None) -> None:
    state = {"model": {"w": torch.full((4,), float(step))}}
    Checkpointer(run, strategy="none", keep_last=keep_last).save(step, state, contents=("model",))


def killed_saving(run: Path, step: int, keep_last: int, kill_at: str) -> int:
    """Save `step` in a process SIGKILLed at `kill_at`; its pid."""
    code = (
        "import sys; from pathlib import Path;"
        "from tests.ckpt.test_prune_is_crash_safe import save;"
        "save(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(run), str(step), str(keep_last)],
        cwd=REPO,
        env={**os.environ, KILL_AT_ENV: kill_at, "PYTHONPATH": str(REPO)},
    )
    assert child.wait(timeout=120) == -signal.SIGKILL
    return child.pid


def hidden(run: Path) -> list[str]:
    return sorted(p.name for p in run.iterdir() if p.name.startswith(".global_step_"))


def removal_warnings(run: Path) -> list:
    """validate's warnings about a stopped removal (a step without huggingface/ has another)."""
    return [
        f
        for f in validate_checkpoint(run).findings
        if f.severity == WARNING and "removal (checkpoint.keep_last) was stopped" in f.message
    ]


def test_a_kill_between_rename_and_delete_leaves_a_leftover_validate_names(tmp_path):
    run = tmp_path / "run"
    save(run, 1)
    save(run, 2)
    pid = killed_saving(run, 3, keep_last=2, kill_at="mid_prune@3")
    leftover = run / f".global_step_1.removing-{pid}"
    assert hidden(run) == [leftover.name]
    assert (leftover / layout.MANIFEST_FILE).is_file()  # renamed whole, not yet deleted
    assert not layout.step_dir(run, 1).exists()
    assert run_steps.list_complete_steps(run) == [2, 3]
    assert run_steps.resume_step(run) == 3

    report = validate_checkpoint(run)
    assert [f.where for f in removal_warnings(run)] == [str(leftover)]
    assert report.ok()  # a warning: the steps themselves are whole

    save(run, 4, keep_last=2)
    assert hidden(run) == []
    assert run_steps.list_complete_steps(run) == [3, 4]
    assert removal_warnings(run) == []


def test_a_step_left_without_manifest_by_an_older_kill_goes_when_older_than_kept(tmp_path):
    """What a kill during the old rmtree left: `huggingface/` of a step whose manifest and
    dist_ckpt/ were already deleted."""
    run = tmp_path / "run"
    for step in (2, 3, 4):
        save(run, step)
    remnant, newer = layout.step_dir(run, 1), layout.step_dir(run, 9)
    for partial in (remnant, newer):
        (partial / layout.HF_ASSETS_DIR).mkdir(parents=True)
        (partial / layout.HF_ASSETS_DIR / "config.json").write_text("{}")
    save(run, 5)  # no keep_last: nothing is removed
    assert remnant.is_dir()
    save(run, 6, keep_last=3)
    assert not remnant.exists()
    assert newer.is_dir()  # not older than the steps kept: not a removal's remnant
    assert run_steps.list_complete_steps(run) == [4, 5, 6]
    assert hidden(run) == []


def test_a_manifestless_step_between_kept_steps_stays(tmp_path):
    run = tmp_path / "run"
    for step in (1, 2, 4):
        save(run, step)
    between = layout.step_dir(run, 3)
    (between / layout.DIST_CKPT_DIR).mkdir(parents=True)
    save(run, 5, keep_last=3)
    assert between.is_dir()
    assert run_steps.list_complete_steps(run) == [2, 4, 5]
