"""bench/export_hf.py and bench/import_hf.py print their tables through one printer (a cell
under every header) and, without --dir, work in a fresh temporary dir that they remove."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench.export_hf import (
    CP,
    CP_SYNC,
    EXPORT_COLUMNS,
    Measured,
    bench_dir,
    print_results,
    summary_rows,
)
from bench.import_hf import IMPORT_COLUMNS
from tests.support.paths import REPO


def _rows() -> list[dict]:
    measured = Measured(
        walls={CP: [1.0, 1.2], CP_SYNC: [2.0, 2.5], "mfsdp": [1.5, 1.7]},
        cpus={CP: [0.2, 0.3], CP_SYNC: [0.3, 0.3], "mfsdp": [0.9, 1.1]},
        rss={CP: 0.01, CP_SYNC: 0.01, "mfsdp": 0.2},
        loads=[0.5, 1.5],
    )
    rows = summary_rows("0.5b", measured, total=10**9, largest=2**28)
    return [{**row, "rss_target_gib": 0.88} for row in rows]


def _cells(line: str) -> list[str]:
    assert line.startswith("| ") and line.endswith(" |"), line
    return line[2:-2].split(" | ")


@pytest.mark.parametrize("columns", [EXPORT_COLUMNS, IMPORT_COLUMNS], ids=["export", "import"])
def test_every_row_has_a_cell_under_each_header_then_its_json(columns, capsys):
    rows = _rows()
    print_results(rows, columns)
    header, rule, *table = capsys.readouterr().out.splitlines()[: 2 + len(rows)]
    assert _cells(header) == [name for name, _cell in columns]
    assert rule == "|---" * len(columns) + "|"
    for row, line in zip(rows, table, strict=True):
        assert _cells(line) == [str(cell(row)) for _name, cell in columns]
        assert _cells(line)[3] == row["method"]


def test_the_json_lines_follow_the_table(capsys):
    rows = _rows()
    print_results(rows, IMPORT_COLUMNS)
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines[2 + len(rows) :]] == rows


def test_without_dir_a_fresh_temporary_dir_is_removed_at_the_end():
    with bench_dir(None, keep=False, prefix="mfsdp_bench_test_") as scratch:
        assert scratch.parent == Path(tempfile.gettempdir()) and scratch.is_dir()
        (scratch / "model").write_text("x")
    assert not scratch.exists()


def test_keep_leaves_the_temporary_dir(capsys):
    with bench_dir(None, keep=True, prefix="mfsdp_bench_test_") as scratch:
        pass
    try:
        assert scratch.is_dir() and f"# kept {scratch}" in capsys.readouterr().err
    finally:
        scratch.rmdir()


def test_an_explicit_dir_is_made_and_kept(tmp_path):
    chosen = tmp_path / "bench" / "export"
    with bench_dir(chosen, keep=False, prefix="mfsdp_bench_test_") as used:
        assert used == chosen and chosen.is_dir()
    assert chosen.is_dir()


@pytest.mark.parametrize("script", ["export_hf.py", "import_hf.py"])
def test_help_offers_keep_and_names_no_machine_path(script):
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "--keep" in done.stdout and "temporary dir" in done.stdout
    assert "/work/" not in done.stdout
