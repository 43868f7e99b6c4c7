"""reward.timeout_s holds for a reward file that installs its own SIGALRM handler at import
(a code-execution reward bounding its checker with `signal.alarm`): the limit was left off
for such a file without a word, and a checker that never ended hung the run. The file's own
alarm still goes to its handler within the limit."""

from __future__ import annotations

import signal
import time

import pytest

from tests.grpo.test_rewards import VERL_SIGNATURE
from trainer.rewards.custom import RewardFunctionError
from trainer.rewards.dispatch import RewardScorer

OWN_HANDLER = (
    "import signal, time\n\n"
    "class CheckerTimeout(Exception):\n    pass\n\n"
    "def on_alarm(signum, frame):\n    raise CheckerTimeout\n\n"
    "signal.signal(signal.SIGALRM, on_alarm)\n\n"
)


@pytest.fixture
def own_alarm_file(tmp_path):
    """A reward file with its own SIGALRM handler and `body` as compute_score's; SIGALRM's
    handler put back after the test (importing the file installs it in this process)."""
    before = signal.getsignal(signal.SIGALRM)

    def make(body: str):
        file = tmp_path / "own_alarm.py"
        file.write_text(f"{OWN_HANDLER}def compute_score({VERL_SIGNATURE}):\n    {body}\n")
        return file

    yield make
    signal.signal(signal.SIGALRM, before)


def test_a_file_with_its_own_alarm_handler_is_still_stopped_at_the_limit(own_alarm_file):
    # a checker that runs on (20 s: where the limit is off, the call returns, not hangs)
    file = own_alarm_file("time.sleep(20)\n    return 1.0")
    scorer = RewardScorer(str(file), timeout_s=1)
    started = time.monotonic()
    with pytest.raises(RewardFunctionError) as raised:
        scorer(["ok"], ["7"], ["7"], [{"index": 3}])
    assert time.monotonic() - started < 4
    assert str(raised.value) == (
        f"reward.path {str(file)!r}, data_source 'ok' (index 3): compute_score did not return"
        " within 1 s (reward.timeout_s)"
    )
    assert signal.getsignal(signal.SIGALRM).__name__ == "on_alarm"  # the file's, back


def test_the_files_own_alarm_still_reaches_its_handler_within_the_limit(own_alarm_file):
    body = (
        "signal.setitimer(signal.ITIMER_REAL, 0.2)\n"
        "    try:\n        time.sleep(5)\n    except CheckerTimeout:\n        return 0.5\n"
        "    return 1.0"
    )
    scorer = RewardScorer(str(own_alarm_file(body)), timeout_s=3)
    assert scorer(["ok"], ["7"], ["7"]).rewards == [0.5]
