"""A wandb tracker without a key stops the run before it starts, in one line; and no rank
can wait on a prompt: a lone process trains with stdin reading nothing, torchrun's ranks get
/dev/null. Was: a traceback per rank once the model was built, or wandb's account prompt on
the terminal while the other ranks waited."""

from __future__ import annotations

import os
import subprocess
import sys

from cli.launch import no_input
from tests.support.paths import REPO
from tests.support.sft import write_chat_jsonl


def test_wandb_without_a_key_is_one_line_before_the_run_starts(tmp_path):
    # its first row is checked first; one row alone would be held out whole by val_ratio
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=2)
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("WANDB_", "NETRC"))
    }
    env["HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "train", "sft"]
        + ["--config", "examples/sft_tiny_cpu.yaml", f"data.train_files={data}"]
        + [f"trainer.run_dir={tmp_path / 'run'}", "trainer.logger=[console,wandb]", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    told = (
        "trainer.logger has wandb but no API key: run `wandb login`, set WANDB_API_KEY, or"
        " WANDB_MODE=offline"
    )
    assert (done.returncode, done.stderr) == (2, f"error: {told}\n")
    assert done.stdout == f'{{"error": "{told}", "exit_code": 2}}\n'
    assert not (tmp_path / "run").exists()


def test_a_lone_training_process_reads_no_input():
    given = sys.stdin
    with no_input():
        assert not sys.stdin.isatty() and sys.stdin.read() == ""
    assert sys.stdin is given


LAUNCH_AND_REPORT_STDIN = """
import sys
from cli.launch import run_ranks
from tests.support.sft import write_chat_jsonl
rank = "import os; print(os.readlink('/proc/self/fd/0'))"
sys.exit(run_ranks([sys.executable, "-c", rank]))
"""


def test_the_ranks_get_no_input(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH_AND_REPORT_STDIN],
        cwd=REPO,
        stdin=subprocess.PIPE,  # what the launching process was given: the ranks get none of it
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == os.devnull
