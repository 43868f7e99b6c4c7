"""The one-line error every mfsdp command ends a failure with, checked the same way by the
hostile-input suites."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click
import pytest

from cli.errors import MfsdpGroup
from cli.main import main

# What a run says as each slow phase of its start begins (cli/launch.py `say_starting`,
# trainer/runner.py): "[sft] loading torch and transformers ...". A run that fails after
# them still ends in one error line.
_STARTING = re.compile(r"\[(sft|grpo)\] .+ \.\.\.")
# What a command says as a slow phase begins, before any failure in it: a large .metadata
# read and its checks (cli/metadata_progress.py), config.json built by transformers
# (cli/config_check_lines.py). Each starts with its verb, so no `error: ...` line is one.
_PHASE = re.compile(r"(reading|checking) .+ \.\.\.")


def lines_besides_starting(stderr: str) -> list[str]:
    """`stderr`'s lines without blank ones and without the run's starting lines."""
    return [line for line in stderr.splitlines() if line.strip() and not _STARTING.fullmatch(line)]


def without_phase_lines(output: str) -> str:
    """`output` without the phase lines a command says as a slow phase begins (`_PHASE`),
    for comparing everything else it printed exactly."""
    kept = output.splitlines(keepends=True)
    return "".join(line for line in kept if not _PHASE.fullmatch(line.rstrip("\n")))


def error_prefixed_lines(output: str) -> list[str]:
    """The lines of `output` that start with `error:`, whatever else it printed."""
    return [line for line in output.splitlines() if line.startswith("error:")]


def one_error(stderr: str, *needles: str) -> str:
    """The single line of `stderr` besides the starting lines and the phase lines said
    before it (`_PHASE`), which must be `error: ...` holding every needle: the last line,
    with nothing but phase lines before it."""
    *phases, last = lines_besides_starting(stderr) or [""]
    assert all(_PHASE.fullmatch(line) for line in phases) and last.startswith("error: "), stderr
    for needle in needles:
        assert needle in last, last
    return last


def usage_error_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *args: str,
    cwd: Path | None = None,
) -> str:
    """The error line of `mfsdp ARGS` run in this process (from `cwd` when given), which must
    be a usage error (exit 2) of one line."""
    if cwd is not None:
        monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["mfsdp", *args])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    return err.strip()


def group_raising(error: BaseException) -> click.Group:
    """A click group under mfsdp's error handling whose one command `go` raises `error`: how
    the CLI prints any exception, without a command that fails that way."""

    @click.group(cls=MfsdpGroup)
    def group() -> None:
        pass

    @group.command()
    def go() -> None:
        raise error

    return group
