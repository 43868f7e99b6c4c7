"""A large `.metadata` reports its reading: minutes for one of millions of chunks, silent
before. The unpickler reports (bytes read, size) from 0 to the whole file, riding on its
budget check; the ckpt commands show it (a bar on a terminal, one line into a log) for a
file of at least PROGRESS_FROM_BYTES, on stderr with --json too (stdout keeps its one object)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

from bench.dcp_metadata_read import build_metadata
from cli.main import app
from mfsdp_ckpt.format import dcp_metadata, restricted_pickle
from mfsdp_ckpt.format.dcp_metadata import allowed_classes, record_types, reporting_reads
from mfsdp_ckpt.format.restricted_pickle import PickleRefused, restricted_loads
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.megatron_checkpoints import save_dcp


def _chunks(metadata) -> int:
    return sum(len(item.chunks) for item in metadata.state_dict_metadata.values())


def test_progress_rises_from_nothing_to_the_whole_file(monkeypatch):
    data = build_metadata(200, 50)
    allowed = allowed_classes("plain")
    monkeypatch.setattr(restricted_pickle, "PROGRESS_EVERY", 1 << 18)
    reports: list[tuple[int, int]] = []
    metadata = restricted_loads(
        data, allowed, record_types(allowed), progress=lambda *r: reports.append(r)
    )
    assert reports[0] == (0, len(data)) and reports[-1] == (len(data), len(data))
    done = [d for d, _ in reports]
    assert done == sorted(done) and len(set(done)) > 5, reports
    assert (
        _chunks(metadata)
        == _chunks(restricted_loads(data, allowed, record_types(allowed)))
        == 10_000
    )


def test_the_budget_still_refuses_with_progress_reported(monkeypatch):
    data = build_metadata(200, 50)
    allowed = allowed_classes("plain")
    monkeypatch.setattr(restricted_pickle, "PROGRESS_EVERY", 1 << 16)
    reports: list[tuple[int, int]] = []
    with pytest.raises(PickleRefused, match="would retain more than"):
        restricted_loads(
            data,
            allowed,
            record_types(allowed),
            budget=len(data) * 4,
            progress=lambda *r: reports.append(r),
        )
    assert reports and reports[-1][0] < len(data)


def test_only_files_past_the_threshold_report_within_the_block(tmp_path, monkeypatch):
    save_dcp({"model": {"w": torch.ones(4)}}, tmp_path / "ck")
    data = (tmp_path / "ck" / ".metadata").read_bytes()
    seen: list[tuple[str, int, int]] = []
    dcp_metadata.load_plain_metadata_bytes(data, "outside")  # no block: no report
    with reporting_reads(lambda *r: seen.append(r)):
        dcp_metadata.load_plain_metadata_bytes(data, "small")  # below PROGRESS_FROM_BYTES
        monkeypatch.setattr(dcp_metadata, "PROGRESS_FROM_BYTES", 0)
        dcp_metadata.load_plain_metadata_bytes(data, "large")
    assert {source for source, _, _ in seen} == {"large"}
    assert seen[0] == ("large", 0, len(data)) and seen[-1] == ("large", len(data), len(data))


@pytest.mark.parametrize("command", [["validate"], ["inspect"]])
def test_ckpt_commands_name_a_large_metadata_before_reading_it(tmp_path, monkeypatch, command):
    ckpt = save_dcp({"model": {"w": torch.ones(4)}}, tmp_path / "ck")
    runner = CliRunner()
    quiet = runner.invoke(app, ["ckpt", *command, str(ckpt)])
    assert ".metadata (" not in quiet.stderr  # below the threshold
    monkeypatch.setattr(dcp_metadata, "PROGRESS_FROM_BYTES", 0)
    shown = runner.invoke(app, ["ckpt", *command, str(ckpt)])
    line = f"reading {ckpt / '.metadata'} (0.0 MiB) ..."
    assert shown.stderr.splitlines().count(line) >= 1, shown.stderr
    as_json = runner.invoke(app, ["ckpt", *command, str(ckpt), "--json"])
    assert as_json.stderr.splitlines().count(line) >= 1, as_json.stderr  # stdout: the object
    assert (quiet.exit_code, shown.exit_code) == (as_json.exit_code, as_json.exit_code)


def test_export_names_a_large_metadata_before_reading_it(tmp_path, monkeypatch):
    ckpt = save_dcp({"model": {"w": torch.ones(4)}}, tmp_path / "ck")
    monkeypatch.setattr(dcp_metadata, "PROGRESS_FROM_BYTES", 0)
    done = CliRunner().invoke(app, ["ckpt", "export-hf", str(ckpt), "--out", str(tmp_path / "o")])
    assert f"reading {ckpt / '.metadata'} (0.0 MiB) ..." in done.stderr.splitlines(), done.stderr


def test_on_a_terminal_the_read_is_a_bar_in_bytes(tmp_path, monkeypatch, capsys):
    from tqdm import tqdm

    from cli.main import main
    from tests.support.terminal import Terminal

    ckpt = save_dcp({"model": {"w": torch.ones(4)}}, tmp_path / "ck")
    size = (ckpt / ".metadata").stat().st_size
    monkeypatch.setattr(dcp_metadata, "PROGRESS_FROM_BYTES", 0)
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr("sys.argv", ["mfsdp", "ckpt", "validate", str(ckpt)])
    try:
        main()
    except SystemExit as exit_:  # validate exits 1 on an invalid checkpoint; here it is valid
        assert exit_.code in (0, None), exit_.code
    capsys.readouterr()
    bars = [line for line in terminal.getvalue().split("\r") if "%|" in line]
    reads = [bar for bar in bars if bar.startswith("read .metadata:")]
    assert reads and all(bar.startswith(("read ", "check ")) for bar in bars), bars
    assert f"/{tqdm.format_sizeof(size)} [" in reads[0], (size, reads)  # of the whole file
    assert "reading " not in terminal.getvalue()  # the bar, not the log line


def test_progress_goes_on_after_the_budget_grows(monkeypatch):
    """Without a given budget it grows with the bytes read, each time it runs out; after
    the first growth the reports stopped until the next (a bar frozen at a third of a large
    file for most of its read). Here MIN_BUDGET is small, so the budget grows many times."""
    data = build_metadata(200, 50)
    allowed = allowed_classes("plain")
    monkeypatch.setattr(restricted_pickle, "MIN_BUDGET", 1 << 20)
    monkeypatch.setattr(restricted_pickle, "PROGRESS_EVERY", 1 << 18)
    reader = restricted_pickle.RestrictedUnpickler(
        data, allowed, record_types(allowed), progress=lambda *r: reports.append(r)
    )
    reports: list[tuple[int, int]] = []
    reader.load()
    assert reader.charged > 8 * restricted_pickle.MIN_BUDGET  # it grew, several times
    done = [d for d, _ in reports]
    gaps = [b - a for a, b in itertools.pairwise(done)]
    # a report per PROGRESS_EVERY of budget charged: at most that many bytes apart
    assert max(gaps) <= restricted_pickle.PROGRESS_EVERY, (max(gaps), len(data))


def test_the_checks_after_a_large_read_report_their_progress(tmp_path, monkeypatch):
    """The checks of what a large file lists (schema, tables, places, shared bytes) take up to
    half as long again as its read: each reports (check, chunks checked, chunks) from 0 to
    its total once the read is done, and only for a file that reported its read."""
    ckpt = save_dcp({"model": {f"w{i}": torch.ones(4, 2) for i in range(6)}}, tmp_path / "ck")
    events: list[tuple] = []
    with reporting_reads(lambda *r: events.append(r), lambda *c: events.append(c)):
        CheckpointReader(ckpt)  # below PROGRESS_FROM_BYTES: nothing
        assert events == []
        monkeypatch.setattr(dcp_metadata, "PROGRESS_FROM_BYTES", 0)
        monkeypatch.setattr(dcp_metadata, "CHECK_REPORT_EVERY", 2)
        CheckpointReader(ckpt)
    source = str(ckpt / ".metadata")
    read_end = max(i for i, e in enumerate(events) if len(e) == 3)
    checks = [e for e in events[read_end + 1 :]]
    assert checks and all(e[0] == source for e in checks), events
    names = list(dict.fromkeys(e[1] for e in checks))
    assert names == ["schema", "tables", "places", "shared bytes"], names
    for name in names:
        done = [(d, t) for _, n, d, t in checks if n == name]
        total = done[0][1]
        assert done[0] == (0, total) and done[-1] == (total, total), (name, done)
        assert [d for d, _ in done] == sorted({d for d, _ in done}), (name, done)
        assert len(done) > 2, (name, done)  # along the way, not only its ends


def test_ckpt_validate_names_the_checks_after_the_read(tmp_path, monkeypatch):
    ckpt = save_dcp({"model": {"w": torch.ones(4)}}, tmp_path / "ck")
    monkeypatch.setattr(dcp_metadata, "PROGRESS_FROM_BYTES", 0)
    shown = CliRunner().invoke(app, ["ckpt", "validate", str(ckpt)])
    lines = shown.stderr.splitlines()
    reading = lines.index(f"reading {ckpt / '.metadata'} (0.0 MiB) ...")
    assert lines[reading + 1] == f"checking what {ckpt / '.metadata'} lists ...", lines


def test_on_a_terminal_each_check_is_a_bar_in_chunks(tmp_path, monkeypatch, capsys):
    from cli.main import main
    from tests.support.terminal import Terminal

    ckpt = save_dcp({"model": {f"w{i}": torch.ones(4) for i in range(3)}}, tmp_path / "ck")
    monkeypatch.setattr(dcp_metadata, "PROGRESS_FROM_BYTES", 0)
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr("sys.argv", ["mfsdp", "ckpt", "inspect", str(ckpt)])
    try:
        main()
    except SystemExit as exit_:
        assert exit_.code in (0, None), exit_.code
    capsys.readouterr()
    bars = [line for line in terminal.getvalue().split("\r") if "%|" in line]
    for check in ("schema", "tables", "places", "shared bytes"):
        assert any(bar.startswith(f"check .metadata: {check}:") for bar in bars), (check, bars)


def test_into_a_log_a_long_check_says_plain_lines(tmp_path, monkeypatch):
    """Without a terminal a check that runs on prints a plain line (as export's bars do):
    here a minute passes between any two reports."""
    clock = itertools.count(0, 60)
    ckpt = save_dcp({"model": {f"w{i}": torch.ones(4) for i in range(8)}}, tmp_path / "ck")
    monkeypatch.setattr(dcp_metadata, "PROGRESS_FROM_BYTES", 0)
    monkeypatch.setattr(dcp_metadata, "CHECK_REPORT_EVERY", 1)
    monkeypatch.setattr("trainer.progress.time", SimpleNamespace(monotonic=lambda: next(clock)))
    shown = CliRunner().invoke(app, ["ckpt", "validate", str(ckpt)])
    lines = shown.stderr.splitlines()
    assert any(line.startswith("check .metadata: tables: ") for line in lines), lines
    assert any(line.startswith("check .metadata: shared bytes: ") for line in lines), lines
