"""A thread a custom reward function starts and leaves running prints to stderr after the
call has returned, as the call's own prints do: stdout stays the command's own (one JSON
object under `--json`). Was: the call's redirection ended with it, and the thread's later
print landed on stdout, before the JSON object."""

from __future__ import annotations

import threading

from tests.grpo.test_rewards import VERL_SIGNATURE
from trainer.rewards.dispatch import RewardScorer


def test_a_thread_left_running_prints_to_stderr_after_the_call(tmp_path, capsys):
    file = tmp_path / "reward_with_thread.py"
    file.write_text(
        "import threading\n\n"
        "def later(go, done):\n"
        "    go.wait()\n"
        "    print('from the thread')\n"
        "    done.set()\n\n"
        f"def compute_score({VERL_SIGNATURE}):\n"
        "    events = (extra_info['go'], extra_info['done'])\n"
        "    threading.Thread(target=later, args=events, daemon=True).start()\n"
        "    return 1.0\n"
    )
    go, done = threading.Event(), threading.Event()
    scores = RewardScorer(str(file))(["s"], ["7"], ["7"], [{"go": go, "done": done}])
    assert scores.rewards == [1.0]
    go.set()  # the call has returned: the thread prints now
    assert done.wait(10)
    print("the command's own")
    out, err = capsys.readouterr()
    assert out == "the command's own\n"
    assert err == "from the thread\n"
