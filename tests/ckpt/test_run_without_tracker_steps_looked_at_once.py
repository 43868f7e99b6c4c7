"""A run dir of many step dirs and no tracker is refused naming the steps to give, and each
step dir is looked at once for that: the list of unfinished saves was worked out again for
every name, so a verl run of 200 steps took 15 s to refuse and one of 1000 steps did not
finish in 15 minutes."""

from __future__ import annotations

import shutil
from pathlib import Path

from mfsdp_ckpt.format import run_steps
from tests.support.interop_layouts import run_cli

FIXTURE_RUN = Path(__file__).parents[1] / "fixtures" / "megatron_fsdp_qwen2" / "run"
FIXTURE_STEP = FIXTURE_RUN / "global_step_2"


def _verl_run(root: Path, steps: int) -> Path:
    """`steps` copies of a verl step (no mfsdp manifest) and no tracker."""
    run = root / "run"
    for step in range(1, steps + 1):
        shutil.copytree(FIXTURE_STEP, run / f"global_step_{step}", copy_function=_link)
        (run / f"global_step_{step}" / "manifest.json").unlink(missing_ok=True)
    return run


def _link(source: str, target: str) -> None:
    Path(target).hardlink_to(source)


def test_each_step_dir_is_judged_once_per_refusal(tmp_path, monkeypatch):
    run = _verl_run(tmp_path, 40)
    looked_at: list[str] = []
    judged = run_steps.step_states

    def counted(run_dir: Path, names: list[str], ours: bool | None = None) -> dict[str, str]:
        looked_at.extend(names)
        return judged(run_dir, names, ours)

    monkeypatch.setattr(run_steps, "step_states", counted)
    code, _out, err = run_cli("ckpt", "validate", str(run))
    assert code != 0 and "40 step dirs and no" in err, err
    assert "global_step_40" in err
    assert max(looked_at.count(f"global_step_{n}") for n in range(1, 41)) <= 3, looked_at[:50]
