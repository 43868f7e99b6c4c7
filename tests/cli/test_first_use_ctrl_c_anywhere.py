"""Ctrl-C wherever it lands is one line and exit 130: inside a finalizer the garbage
collector runs (Python drops an exception raised there, and the demo ran on to the end),
inside a library that turns it into an error of its own, and while torchrun's process is
still loading torch (its traceback came before the launching mfsdp's one line)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import click
from click.testing import CliRunner

from cli.errors import MfsdpGroup
from tests.support.paths import REPO


@click.group(cls=MfsdpGroup)
def group() -> None:
    pass


@group.command()
def collects() -> None:
    class Finalized:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the finalizer runs
            sum(range(10_000))  # the handler runs here, inside __del__

    Finalized()  # dropped at once: its __del__ runs now
    time.sleep(20)  # the rest of the command, which the Ctrl-C must stop


@group.command()
def imports() -> None:
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(20)
    except KeyboardInterrupt:  # what numpy says when an import cut short is tried again
        raise RuntimeError("CPU dispatcher tracer already initlized") from None


def test_ctrl_c_inside_a_finalizer_still_stops_the_command():
    started = time.monotonic()
    done = CliRunner().invoke(group, ["collects"])
    assert (done.exit_code, done.output) == (130, "error: interrupted\n")
    assert time.monotonic() - started < 10


def test_an_error_a_ctrl_c_caused_in_a_library_is_the_interrupt_not_a_traceback():
    done = CliRunner().invoke(group, ["imports"])
    assert (done.exit_code, done.output) == (130, "error: interrupted\n")


STOPPED_LOADING_TORCH = """
import builtins, runpy, sys
real_import = builtins.__import__
def ctrl_c_on_torch(name, *args, **kwargs):
    if name.startswith("torch.distributed.elastic"):
        raise KeyboardInterrupt  # Ctrl-C while torch loads
    return real_import(name, *args, **kwargs)
builtins.__import__ = ctrl_c_on_torch
sys.argv = ["cli.torchrun", "--standalone", "--nproc-per-node=2", "-m", "cli.train", "sft"]
runpy.run_module("cli.torchrun", run_name="__main__")
"""


def test_ctrl_c_while_torchrun_loads_torch_exits_130_without_a_traceback():
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_LOADING_TORCH],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (130, "")
