"""A Ctrl-C of a `--nproc-per-node N` run is answered by the launching process, which never
loads torch: it imported all of torch (for the checkpointer's errors) just to word its resume
line, tens of seconds on a busy machine, and a second Ctrl-C in that time raised inside the
import and ended in a traceback with exit 1. The line is now composed torch-free, with a
second Ctrl-C held: the same one line, exit 130."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.fresh_python import modules_after
from tests.support.paths import REPO

WORD_THE_LINE = """
from cli.run_report import interrupted_run
from trainer.config import SFTConfig, load_config
cfg = load_config(SFTConfig, None, [f"trainer.run_dir={sys.argv[2]}"])
print(interrupted_run(cfg, 0))
"""


def test_the_interrupt_line_loads_no_torch(tmp_path) -> None:
    loaded = modules_after(WORD_THE_LINE, str(tmp_path / "run"), roots=("torch",))
    assert loaded == []


SECOND_CTRL_C = """
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
from cli.errors import report_errors
from cli.main import command_ends_process

command_ends_process()


def run():
    raise KeyboardInterrupt


def line():
    os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, while the line is worded
    time.sleep(0.5)
    return "interrupted after step 3"


report_errors(run, interrupted=line)
"""


def test_a_second_ctrl_c_while_the_line_is_worded_changes_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SECOND_CTRL_C, str(REPO)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert (done.returncode, done.stderr) == (130, "error: interrupted after step 3\n")
