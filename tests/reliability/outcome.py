"""Running a command in-process and judging what it did: `invoke` turns a click run into an
`Outcome` (exit code, the one `error:` line, whether a traceback escaped); `Expect` is what
a case requires of it. Commands run through click's runner, so an exception that escapes
the command's error mapping (a traceback for the user) shows up as `Outcome.traceback`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner, Result

from cli.main import app

PROG = "mfsdp"  # the command as a user types it; click's runner would name it after `app`


def run_in_process(args: Sequence[str | Path]) -> Result:
    """`mfsdp ARGS` run through click's runner, its messages naming the command as a user
    types it (`see 'mfsdp train sft --help'`, not `'app train sft --help'`)."""
    return CliRunner().invoke(app, [str(a) for a in args], prog_name=PROG)


@dataclass
class Outcome:
    exit_code: int
    message: str  # the `error:` line, else the last line of output
    output: str
    traceback: bool  # an exception escaped the command's error handling

    def brief(self) -> str:
        return f"exit {self.exit_code}: {self.message}"


def invoke(args: Sequence[str | Path]) -> Outcome:
    try:
        result = run_in_process(args)
    except (
        BaseException
    ) as err:  # DCP's CheckpointException is a BaseException: click lets it through
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return Outcome(
            1, f"{type(err).__name__}: {first}", f"Traceback: {type(err).__name__}: {err}", True
        )
    output = result.output
    escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
    if escaped:
        output += f"\nTraceback: {type(result.exception).__name__}: {result.exception}"
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    message = errors[0] if errors else (lines[-1] if lines else "")
    return Outcome(result.exit_code, message, output, escaped)


@dataclass(frozen=True)
class Expect:
    """What one consumer must do: exit code and a fragment of its message ('' = any)."""

    exit_code: int
    fragment: str = ""
    wrote_nothing: bool = True  # on failure, no output and the run dir byte-identical
    note: str = ""  # why, where the outcome is not the obvious one (shown in the report)

    def check(self, outcome: Outcome) -> list[str]:
        problems = []
        if outcome.traceback:
            problems.append("an exception escaped (traceback)")
        if outcome.exit_code != self.exit_code:
            problems.append(f"exit {outcome.exit_code}, expected {self.exit_code}")
        if self.fragment and self.fragment not in outcome.output:
            problems.append(f"output lacks {self.fragment!r}")
        if (
            outcome.exit_code != 0
            and not outcome.message.startswith("error:")
            and outcome.message.strip()
        ) and "INVALID" not in outcome.message:  # validate's verdict line is its one-line answer
            problems.append(f"not a one-line error: {outcome.message!r}")
        return problems


@dataclass
class Observed:
    outcome: Outcome
    problems: list[str]
