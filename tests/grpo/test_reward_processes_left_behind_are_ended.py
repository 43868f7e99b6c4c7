"""A reward function whose call failed or was stopped at reward.timeout_s while it waited on
a `multiprocessing` process of its own (a checker running the model's program) does not
keep the run alive: multiprocessing joins every such process at exit, and the run sat after
its error line for as long as the process ran (forever for a program that never ends). The
process is ended, quietly: it inherited the command's SIGTERM handler, and SIGTERM made it
print a traceback."""

from __future__ import annotations

import json
import multiprocessing
import time

import pytest

from mfsdp_ckpt.errors import EXIT_FAILED
from tests.grpo.test_rewards import VERL_SIGNATURE, _one_grpo_step_in_a_fresh_process
from tests.support.interop_layouts import one_error_line
from trainer.rewards.custom import RewardFunctionError
from trainer.rewards.dispatch import RewardScorer

WAITS_ON_A_PROCESS = (
    "import multiprocessing, time\n"
    "    child = multiprocessing.Process(target=time.sleep, args=(1000,))\n"
    "    child.start()\n"
)


@pytest.mark.parametrize(
    "then, timeout_s",
    [("child.join()\n    return 1.0", 1), ("raise ValueError('checker crashed')", 0)],
)
def test_the_processes_a_failed_or_stopped_call_left_are_ended(tmp_path, then, timeout_s):
    file = tmp_path / "waits.py"
    file.write_text(f"def compute_score({VERL_SIGNATURE}):\n    {WAITS_ON_A_PROCESS}    {then}\n")
    before = set(multiprocessing.active_children())
    with pytest.raises(RewardFunctionError):
        RewardScorer(str(file), timeout_s=timeout_s)(["ok"], ["7"], ["7"])
    assert set(multiprocessing.active_children()) == before


def test_a_grpo_run_whose_reward_waits_on_a_process_exits_after_its_time_limit(tmp_path):
    started = time.monotonic()
    done = _one_grpo_step_in_a_fresh_process(tmp_path, f"{WAITS_ON_A_PROCESS}    child.join()")
    assert time.monotonic() - started < 60  # the process sleeps 1000 s
    assert done.returncode == EXIT_FAILED, done.stderr
    line = one_error_line(done.stderr)
    assert line.endswith("): compute_score did not return within 1 s (reward.timeout_s)"), line
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout) == {"error": line.removeprefix("error: "), "exit_code": 1}
