"""Processes and threads a custom reward function leaves running never keep the run alive
once its outcome is decided, failed or not: the command exits with its code within a
bound, and no process the reward started is left behind.

Was: a reward module that kept a `multiprocessing.Pool` and then raised printed its error
line and never exited (Pool's exit-time join waited on workers re-forked after the outcome
was decided, which ignored SIGTERM), deaf to SIGTERM and Ctrl-C; a reward that left a
non-daemon thread running held a finished run at exit for good.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.grpo.test_rewards import VERL_SIGNATURE
from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO
from trainer.grpo.synthetic import write_addition_data

# Far above a tiny run's time (about 20 s here), far below "never"
RUN_BOUND_S = 240

# Each pool worker, when it starts (re-forked ones too), writes its pid to PIDS; the module's
# atexit hook writes HOOK, as a reward module's exit-time flush would
_POOL = (
    "import atexit, multiprocessing as mp, os, signal, threading\n"
    "_P = None\n"
    "atexit.register(lambda: open(HOOK, 'w').write('ran'))\n"
    "def _note(pids, ignore_sigterm):\n"
    "    if ignore_sigterm:\n"
    "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "    with open(pids, 'a') as f:\n"
    "        f.write(f'{os.getpid()}\\n')\n"
    "def _sq(x):\n"
    "    return x * x\n"
)

# The pool's work cannot be sent (its function is in a module no worker can import): the call raises
FAILING = (
    _POOL + f"def compute_score({VERL_SIGNATURE}):\n"
    "    global _P\n"
    "    if _P is None:\n"
    "        _P = mp.Pool(2, initializer=_note, initargs=(PIDS, False))\n"
    "    return float(sum(_P.map(_sq, [1, 2])))\n"
)

# Scores through the pool (a builtin is sent fine), whose workers ignore SIGTERM, and leaves
# a thread that never ends
SUCCEEDING = (
    _POOL + f"def compute_score({VERL_SIGNATURE}):\n"
    "    global _P\n"
    "    if _P is None:\n"
    "        _P = mp.Pool(2, initializer=_note, initargs=(PIDS, True))\n"
    "        threading.Thread(target=threading.Event().wait).start()\n"
    "    return float(sum(_P.map(abs, [0, -1])))\n"
)


def _run(tmp_path: Path, body: str) -> tuple[int, str, list[int]]:
    """Exit code and stderr of a tiny GRPO run scored by `body`, and its pool's worker pids."""
    pids = tmp_path / "pids"
    reward = tmp_path / "reward_pool.py"
    hook = repr(str(tmp_path / "hook"))
    reward.write_text(body.replace("PIDS", repr(str(pids))).replace("HOOK", hook))
    files = write_addition_data(tmp_path / "data", digits=4)
    done = mfsdp(
        *("train", "grpo", "--config", str(REPO / "examples" / "grpo_tiny_cpu.yaml")),
        *(f"data.train_files={files['rl_train']}", f"trainer.run_dir={tmp_path / 'run'}"),
        *("data.val_files=[]", "trainer.total_steps=1", "data.train_batch_size=2"),
        *("rollout.n=2", "rollout.max_response_length=2", "actor.ppo_mini_batch_size=2"),
        *("actor.ppo_micro_batch_size_per_gpu=2", "actor.log_prob_micro_batch_size_per_gpu=2"),
        f"reward.path={reward}",
        timeout=RUN_BOUND_S,
    )
    started = [int(line) for line in pids.read_text().split()] if pids.exists() else []
    return done.returncode, done.stderr, started


def _running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie left for its new parent to reap does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize(("body", "code"), [(FAILING, 1), (SUCCEEDING, 0)])
def test_a_reward_keeping_a_pool_leaves_nothing_running(tmp_path, body, code):
    returncode, stderr, workers = _run(tmp_path, body)
    assert returncode == code, stderr
    if code == 1:
        assert stderr.strip().splitlines()[-1].startswith("error: reward.path ")
    assert workers, stderr  # the reward's pool did start
    assert [pid for pid in workers if _running(pid)] == [], stderr
    assert "Traceback" not in stderr
    assert os.path.isdir(tmp_path / "run")
    # a thread left running is not waited for, but the module's exit hooks still ran
    assert (tmp_path / "hook").read_text() == "ran", stderr
