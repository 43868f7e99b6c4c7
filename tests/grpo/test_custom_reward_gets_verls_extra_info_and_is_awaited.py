"""A custom reward function is called as verl's reward manager calls it.

Were: a row without `extra_info` (or a null one) gave the function None where verl gives `{}`
(its RLHFDataset), and verl's `num_turns` and `rollout_reward_scores` were missing, so a verl
reward file calling `extra_info.get(...)` failed at the first reward, after the model loaded,
blaming the function. An `async def compute_score`, which verl awaits, was loaded and then
failed at the first reward with "returned <coroutine ...>, not a number".
"""

from __future__ import annotations

import json
import signal
import threading

import pytest

from mfsdp_ckpt.errors import EXIT_USAGE
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.rewards.custom import RewardFunctionError
from trainer.rewards.dispatch import RewardScorer
from trainer.rewards.time_limit import WATCHDOG_NAME
from trainer.tiny import build_tokenizer

# verl's reward manager (verl/workers/reward_manager/naive.py at b178a3cd) adds these to every
# row's extra_info; its single-turn agent loop counts 2 turns and gives no rollout scores
VERL_ADDED = {"num_turns": 2, "rollout_reward_scores": {}}


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _row(**extra_info) -> dict:
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "What is 2 + 3?"}],
        "reward_model": {"style": "rule", "ground_truth": "5"},
        **extra_info,
    }


def _jsonl(tmp_path, rows: list[dict]) -> str:
    path = tmp_path / "rl.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _recording_reward(tmp_path) -> tuple[str, object]:
    """A verl-style reward file that reads `extra_info.get(...)`, writes down each extra_info
    it is given, and changes it (which must reach no other call)."""
    record = tmp_path / "seen.jsonl"
    file = tmp_path / "verl_style_reward.py"
    file.write_text(
        "import json\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    split = extra_info.get('split', 'train')\n"
        f"    with open({str(record)!r}, 'a') as out:\n"
        "        out.write(json.dumps(extra_info) + '\\n')\n"
        "    extra_info['changed_by_the_function'] = True\n"
        "    return {'score': float(ground_truth in solution_str), 'split': split}\n"
    )
    return str(file), record


def test_the_function_gets_extra_info_as_verl_gives_it(tmp_path, tokenizer):
    rows = [_row(), _row(extra_info=None), _row(extra_info={"index": 3, "split": "test"})]
    path = _jsonl(tmp_path, rows)
    prompts, _ = load_rl_prompts([path], RLDataConfig(), tokenizer, custom_reward=True)
    reward, record = _recording_reward(tmp_path)
    scorer = RewardScorer(reward)
    for _ in range(2):  # what one call changed reaches no later call
        scores = scorer(
            [p.data_source for p in prompts],
            ["#### 5", "#### 4", "#### 5"],
            [p.ground_truth for p in prompts],
            [p.extra_info for p in prompts],
        )
        assert scores.rewards == [1.0, 0.0, 1.0]
    seen = [json.loads(line) for line in record.read_text().splitlines()]
    given = [VERL_ADDED, VERL_ADDED, {"index": 3, "split": "test", **VERL_ADDED}]
    assert seen == given * 2
    # the rows themselves are as the file holds them (a resume digests them)
    assert [p.extra_info for p in prompts] == [None, None, {"index": 3, "split": "test"}]


def test_the_row_index_still_names_a_failing_row(tmp_path):
    file = tmp_path / "failing_reward.py"
    file.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return extra_info['answer']\n"
    )
    with pytest.raises(RewardFunctionError) as raised:
        RewardScorer(str(file))(["openai/gsm8k"], ["#### 5"], ["5"], [{"index": 12}])
    assert str(raised.value) == (
        f"reward.path {str(file)!r}, data_source 'openai/gsm8k' (index 12): "
        "compute_score raised KeyError: 'answer'"
    )


@pytest.mark.parametrize(
    ("extra_info", "shown"), [("row 2", "str 'row 2'"), ([1, 2], "list [1, 2]"), (7, "int 7")]
)
def test_an_extra_info_verl_cannot_read_is_refused_when_the_data_loads(
    tmp_path, tokenizer, extra_info, shown
):
    path = _jsonl(tmp_path, [_row(), _row(extra_info=extra_info)])
    for custom_reward in (True, False):  # verl stops on it whatever the reward
        with pytest.raises(RLDataError) as raised:
            load_rl_prompts([path], RLDataConfig(), tokenizer, custom_reward=custom_reward)
        assert raised.value.exit_code == EXIT_USAGE
        assert str(raised.value) == (
            f"{path}:2: extra_info is {shown}: verl reads every row's extra_info as a dict and"
            " stops on anything else, and a reward function is given it as one; write it as a"
            " struct (a JSON object), or leave it out or null for {}"
        )


def _async_reward(tmp_path, body: str) -> str:
    file = tmp_path / "async_reward.py"
    file.write_text(
        "import asyncio\n\n"
        "LOOPS = set()\n\n"
        "async def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    LOOPS.add(asyncio.get_running_loop())\n"
        "    await asyncio.sleep(0)\n"
        f"    {body}\n"
    )
    return str(file)


def test_an_async_reward_function_is_awaited_on_one_loop(tmp_path):
    """Its score is the number of event loops it has run on so far: one, for every call
    (a client it opened on the first call would still work on the next)."""
    scorer = RewardScorer(_async_reward(tmp_path, "return float(len(LOOPS))"))
    assert scorer(["s"] * 3, ["a", "b", "c"], ["a", "x", "c"]).rewards == [1.0, 1.0, 1.0]
    assert scorer(["s"], ["a"], ["a"]).rewards == [1.0]

    right = _async_reward(tmp_path, "return float(ground_truth in solution_str)")
    assert RewardScorer(right)(["s"] * 2, ["#### 5", "#### 4"], ["5", "5"]).rewards == [1.0, 0.0]


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ("raise ValueError('boom')", "compute_score raised ValueError: boom"),
        ("return 'high'", "compute_score returned 'high' (str), not a number"),
    ],
)
def test_an_async_reward_function_fails_as_a_plain_one_does(tmp_path, body, what):
    file = _async_reward(tmp_path, body)
    with pytest.raises(RewardFunctionError) as raised:
        RewardScorer(file)(["openai/gsm8k"], ["#### 5"], ["5"], [{"index": 4}])
    assert (
        str(raised.value) == f"reward.path {file!r}, data_source 'openai/gsm8k' (index 4): {what}"
    )


def test_an_async_reward_function_past_its_time_limit_stops_at_that_row(tmp_path):
    file = _async_reward(tmp_path, "await asyncio.sleep(3600)")
    with pytest.raises(RewardFunctionError) as raised:
        RewardScorer(file, timeout_s=0.3)(["ok"], ["7"], ["7"], [{"index": 2}])
    assert str(raised.value) == (
        f"reward.path {file!r}, data_source 'ok' (index 2): compute_score did not return"
        " within 0.3 s (reward.timeout_s)"
    )
    # nothing left armed to go off later in the run
    assert not [t for t in threading.enumerate() if t.name == WATCHDOG_NAME]
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
