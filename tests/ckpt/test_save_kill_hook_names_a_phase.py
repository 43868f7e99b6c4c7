"""MFSDP_CKPT_KILL_AT (the crash tests' hook that SIGKILLs a save at a phase) is checked as it
is read: a phase not in SAVE_PHASES, or a rank or step that is not a number, is refused in one
line naming the variable.

Was: a misspelt phase never matched, so the crash test that set it passed without its kill
ever happening, and `before_files:x` raised int()'s ValueError in the middle of a save."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.kill_points import KILL_AT_ENV, SAVE_PHASES


@pytest.mark.parametrize(
    "given", ["before_file", "mid_file:x", "after_files@two", "after_rename:", "before_files:0@"]
)
def test_a_kill_point_naming_no_phase_rank_or_step_is_refused(given, tmp_path, monkeypatch):
    monkeypatch.setenv(KILL_AT_ENV, given)
    with pytest.raises(MfsdpUsageError) as refused:
        Checkpointer(tmp_path / "run", strategy="fsdp2")
    said = str(refused.value)
    assert said.startswith(f"{KILL_AT_ENV}={given!r}: ") and "\n" not in said
    assert all(phase in said for phase in SAVE_PHASES)


@pytest.mark.parametrize(
    "given", ["", *SAVE_PHASES, "mid_file:1", "after_files:0@4", "after_rename@6"]
)
def test_a_kill_point_of_a_phase_is_taken(given, tmp_path, monkeypatch):
    monkeypatch.setenv(KILL_AT_ENV, given)
    assert Checkpointer(tmp_path / "run", strategy="fsdp2").run_dir.is_dir()
