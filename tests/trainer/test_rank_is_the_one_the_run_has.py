"""Every "rank 0 alone" decision reads the rank the run has: RANK where RANK and WORLD_SIZE
make the process join a group, else 0. `RANK=1` without WORLD_SIZE trained alone (as rank
0 of a group of one) and exited 0 with no result line and no --json object, the report
reading RANK alone; and RANK compared as text made `RANK=00` rank 0 to `env_int` and not
to the places that compared it with "0"."""

from __future__ import annotations

import json

import pytest

from cli.run_report import report
from trainer.data import sft_dataset
from trainer.env_ints import process_rank


@pytest.mark.parametrize(
    ("rank", "world_size", "expected"),
    [(None, None, 0), ("1", None, 0), ("1", "2", 1), ("00", "2", 0), (" 0", "2", 0), ("3", "4", 3)],
)
def test_the_rank_is_the_groups_or_zero_alone(monkeypatch, rank, world_size, expected):
    for name, value in (("RANK", rank), ("WORLD_SIZE", world_size)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert process_rank() == expected
    assert sft_dataset._main_rank() == (expected == 0)


@pytest.mark.parametrize(("world_size", "said"), [(None, True), ("2", False)])
def test_a_run_alone_with_rank_set_reports_its_result(monkeypatch, capsys, world_size, said):
    monkeypatch.setenv("RANK", "1")
    if world_size is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", world_size)
    report({"final_step": 1}, True, "unused")
    out = capsys.readouterr().out
    assert (json.loads(out) if said else out) == ({"final_step": 1} if said else "")
