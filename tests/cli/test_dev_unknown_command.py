"""`./dev bogus` says that `bogus` is no command of its, in one line on stderr, with the
closest one when there is one; before, it printed the usage and exited 2 without a word
about what was wrong. `./dev help` is the usage, exit 0; `./dev` alone is bad usage: the
usage on stderr, exit 2, nothing on stdout."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.paths import REPO


def _dev(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / "dev"), *args], capture_output=True, text=True, timeout=30, cwd=REPO
    )


@pytest.mark.parametrize(
    "given, said",
    [
        ("bogus", "'bogus'; its commands: demo, test, mfsdp, setup (see ./dev help)"),
        ("tset", "'tset' (did you mean 'test'?)"),
        ("dmeo", "'dmeo' (did you mean 'demo'?)"),
        ("\x1b[31mx", "$'\\E[31mx'; its commands: demo, test, mfsdp, setup (see ./dev help)"),
    ],
)
def test_an_unknown_command_is_named_in_one_line(given, said):
    done = _dev(given)
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"./dev: unknown command {said}\n",
    )


def test_help_is_the_usage():
    done = _dev("help")
    assert done.returncode == 0 and "./dev mfsdp ARGS" in done.stdout and done.stderr == ""


def test_no_command_is_the_usage_on_stderr():
    done = _dev()
    assert (done.returncode, done.stdout) == (2, "") and "./dev mfsdp ARGS" in done.stderr
