"""Where no bar is drawn (stderr a log file or a pipe), a long `mfsdp ckpt` command prints a
plain progress line now and then. It printed nothing until its summary: a 10-minute export
or validate --deep in a log file gave no sign of progress, nor a way to tell a hang from
slow work. A command that ends within the interval prints no line."""

from __future__ import annotations

import io
import re
import time
from types import SimpleNamespace

import pytest

from trainer.progress import CallbackBar


def _log_file(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """stderr a file, not a terminal; set in the test itself, since pytest puts its own
    capture back as sys.stderr once fixtures ran."""
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    return stderr


def test_a_long_command_prints_a_plain_line_per_interval(monkeypatch):
    log_file = _log_file(monkeypatch)
    total = 40_100_000_000
    with CallbackBar(True, "B", desc="export", unit_scale=True, plain_every=0.05) as update:
        assert update is not None
        update(0, total)
        time.sleep(0.06)
        update(12_300_000_000, total)
        update(12_400_000_000, total)  # within the interval of the last line: none
        time.sleep(0.06)
        update(20_000_000_000, total)
    lines = log_file.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert re.fullmatch(r"export: 12\.3 GB of 40\.1 GB \(30%\), [\d.]+ GB/s, \d+s left", lines[0])
    assert lines[1].startswith("export: 20.0 GB of 40.1 GB (49%), ")


def test_counts_without_a_scale_name_their_unit(monkeypatch):
    log_file = _log_file(monkeypatch)
    with CallbackBar(True, "tensor", "validate", plain_every=0.01) as update:
        update(0, 297)
        time.sleep(0.02)
        update(120, 297)
    line = log_file.getvalue()
    assert re.fullmatch(
        r"validate: 120 tensors of 297 tensors \(40%\), [\d.,]+ tensors/s, \d+s left\n", line
    )


@pytest.mark.parametrize(
    ("done", "line"),
    [
        (15_450, "15,450 tensors of 62,563 tensors (24%), 258 tensors/s, 3m02s left"),
        (30, "30 tensors of 62,563 tensors (0%), 0.5 tensors/s, 34h44m left"),
    ],
)
def test_counts_are_whole_numbers_never_scientific(monkeypatch, done, line):
    """A many-expert validate --deep said `1.545e+04 tensors of 6.256e+04 tensors`."""
    log_file = _log_file(monkeypatch)
    clock = iter([0.0, 60.0])
    monkeypatch.setattr("trainer.progress.time", SimpleNamespace(monotonic=lambda: next(clock)))
    with CallbackBar(True, "tensor", "validate", plain_every=30) as update:
        update(0, 62_563)
        update(done, 62_563)
    assert log_file.getvalue() == f"validate: {line}\n"


def test_a_command_shorter_than_the_interval_prints_nothing(monkeypatch):
    log_file = _log_file(monkeypatch)
    with CallbackBar(True, "B", desc="export", unit_scale=True) as update:
        for done in range(0, 101, 10):
            update(done, 100)
    assert log_file.getvalue() == ""


def test_nothing_when_disabled(monkeypatch):
    log_file = _log_file(monkeypatch)
    with CallbackBar(False, "B", plain_every=0) as update:
        assert update is None
    assert log_file.getvalue() == ""


def test_the_first_line_comes_sooner_than_the_interval(monkeypatch):
    """The first line came a whole interval (30 s) after the first report, itself seconds
    into the command: 40 s of nothing in a log. It now comes FIRST_PLAIN_LINE_SECONDS after
    that report, and the next ones PLAIN_LINE_SECONDS apart."""
    from trainer.progress import FIRST_PLAIN_LINE_SECONDS, PLAIN_LINE_SECONDS

    assert FIRST_PLAIN_LINE_SECONDS < PLAIN_LINE_SECONDS
    log_file = _log_file(monkeypatch)
    first, every = FIRST_PLAIN_LINE_SECONDS, PLAIN_LINE_SECONDS
    times = [0.0, first - 1, first + 1, first + every - 1, first + every + 2]
    clock = iter(times)
    monkeypatch.setattr("trainer.progress.time", SimpleNamespace(monotonic=lambda: next(clock)))
    with CallbackBar(True, "tensor", "validate") as update:
        for done in range(len(times)):
            update(done, 100)
    lines = log_file.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "validate: 2 tensors of 100 tensors (2%)",
        "validate: 4 tensors of 100 tensors (4%)",
    ], lines
