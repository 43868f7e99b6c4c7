"""A Ctrl-C or SIGTERM to the process group of `mfsdp train --nproc-per-node 2` once rank 0
printed the run's result leaves the command's outcome the result's: exit 0, the result alone.

Was: the signal stopped torchrun while the ranks shut down; it exited 130, and the launching
mfsdp followed the printed result with `error: interrupted after step N` (with --json a
second JSON object, `{"error": "SIGTERM: ...", "exit_code": 143}`) and exit 130 or 143. A
Ctrl-C landing in a rank's atexit hooks printed a KeyboardInterrupt traceback too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.support.paths import repo_env
from tests.support.sft import TINY_CONFIG, write_chat_jsonl

# `mfsdp ARGS` as the console script runs it
_MFSDP = "import sys\nsys.argv = ['mfsdp', *sys.argv[1:]]\nfrom cli.main import main\nmain()\n"


@pytest.mark.parametrize(
    ("number", "as_json"), [(signal.SIGTERM, True), (signal.SIGINT, False)], ids=["term", "int"]
)
def test_a_signal_after_the_result_leaves_exit_0_and_the_result_alone(tmp_path, number, as_json):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    args = ["train", "sft", "--config", str(TINY_CONFIG), "--nproc-per-node", "2"]
    args += [f"data.train_files=[{data}]", f"trainer.run_dir={tmp_path / 'run'}"]
    args += ["trainer.total_steps=1", "data.val_ratio=0", "trainer.eval_every=0"]
    args += ["trainer.progress_bar=false", *(["--json"] if as_json else [])]
    process = subprocess.Popen(
        [sys.executable, "-c", _MFSDP, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**repo_env(), "OMP_NUM_THREADS": "1"},
        cwd=tmp_path,
        start_new_session=True,  # its own process group, as a terminal's job or a scheduler's
    )
    assert process.stdout is not None
    result = process.stdout.readline()  # rank 0 printed it; the ranks are shutting down
    os.killpg(process.pid, number)  # the whole group: launcher, torchrun and ranks
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, (process.returncode, result, out, err)
    assert out == "", out  # the result alone
    if as_json:
        assert json.loads(result)["final_step"] == 1, result
    else:
        assert result.startswith("sft: step 1, loss "), result
    unexpected = [line for line in err.splitlines() if not line.startswith("[sft] ")]
    assert unexpected == [], err  # no `error: interrupted`, no traceback
