"""`runs` holding runs/demo/sft (what `mfsdp demo --out runs/demo` writes) and runs/sft_tiny
holds two runs: the runs a sub-dir holds count, one level further down, where counting
`runs`' own sub-dirs alone found "one run" (and read runs/sft_tiny). Bounded: a dir of
thousands of entries is not walked."""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.format import finding_runs
from mfsdp_ckpt.format.layout import TRACKER_FILE


def make_run(run: Path) -> Path:
    (run / "global_step_2").mkdir(parents=True)
    (run / TRACKER_FILE).write_text("2")
    return run


def test_a_run_in_a_sub_dir_is_found_and_one_held_directly_is_skipped(tmp_path):
    demo, tiny = make_run(tmp_path / "demo" / "sft"), make_run(tmp_path / "sft_tiny")
    (tmp_path / "demo" / "data" / "sft").mkdir(parents=True)  # tables, no run
    names = sorted(p.name for p in tmp_path.iterdir())
    held = finding_runs.runs_held(tmp_path, names)
    assert held == [tiny]
    assert finding_runs.runs_one_level_down(tmp_path, names, held) == [demo]


def test_past_its_bound_the_search_stops(tmp_path, monkeypatch):
    make_run(tmp_path / "b" / "sft")
    crowded = tmp_path / "a"
    for n in range(5):
        (crowded / f"f{n}").mkdir(parents=True)
    monkeypatch.setattr(finding_runs, "MAX_NAMES_LISTED", 4)
    assert finding_runs.runs_one_level_down(tmp_path, ["a", "b"], []) == []
    monkeypatch.setattr(finding_runs, "MAX_NAMES_LISTED", 6)
    assert finding_runs.runs_one_level_down(tmp_path, ["a", "b"], []) == [tmp_path / "b" / "sft"]
