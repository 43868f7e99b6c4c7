"""A reward function that changes a list in its `ground_truth` or in `extra_info` (a checker
popping its test cases) changes nothing beyond its own call. The rows are kept for the whole
run and were given by reference (only `extra_info`'s top level was copied): a prompt drawn
again at a later step reached the function with fewer tests, and a resumed run, whose rows
were read afresh, scored differently from an uninterrupted one. verl builds its rows anew
each time it draws them."""

from __future__ import annotations

import json

from tests.grpo.test_rewards import VERL_SIGNATURE
from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO
from trainer.rewards.dispatch import RewardScorer

TESTS = 10  # test cases each row's extra_info holds


def _consuming_reward(tmp_path, log):
    """A reward file whose function logs the lengths it is given, then consumes them."""
    file = tmp_path / "consuming.py"
    file.write_text(
        "import json\n\n"
        f"def compute_score({VERL_SIGNATURE}):\n"
        f"    with open({str(log)!r}, 'a') as f:\n"
        "        seen = [extra_info['index'], len(extra_info['tests']), len(ground_truth),"
        " len(extra_info['deep']['cases'])]\n"
        "        f.write(json.dumps(seen) + '\\n')\n"
        "    extra_info['tests'].pop()\n"
        "    extra_info['deep']['cases'].clear()\n"
        "    ground_truth.append('x')\n"
        "    return 0.0\n"
    )
    return file


def _extra(index: int) -> dict:
    return {"index": index, "tests": [f"t{k}" for k in range(TESTS)], "deep": {"cases": [1, 2]}}


def test_each_call_is_given_its_own_copy_of_ground_truth_and_extra_info(tmp_path):
    log = tmp_path / "seen.jsonl"
    scorer = RewardScorer(str(_consuming_reward(tmp_path, log)))
    truths, extras = [["5"], ["7"]], [_extra(0), _extra(1)]
    for _step in range(3):  # the same rows, scored again at later steps
        scorer(["s", "s"], ["5", "7"], truths, extras)
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert seen == [[0, TESTS, 1, 2], [1, TESTS, 1, 2]] * 3
    assert truths == [["5"], ["7"]] and extras == [_extra(0), _extra(1)]  # the rows as read


def _rows(path):
    with open(path, "w") as f:
        for i in range(8):
            a, b = i % 5, (i * 3) % 5
            row = {
                "data_source": "my_checker",
                "prompt": [{"role": "user", "content": f"{a} + {b} ="}],
                "reward_model": {"style": "rule", "ground_truth": [str(a + b)]},
                "extra_info": _extra(i),
            }
            f.write(json.dumps(row) + "\n")
    return path


def _grpo(tmp_path, reward, data, run_dir, *overrides):
    done = mfsdp(
        *("train", "grpo", "--config", str(REPO / "examples" / "grpo_tiny_cpu.yaml")),
        *(f"data.train_files={data}", "data.val_files=[]", f"trainer.run_dir={run_dir}"),
        *("data.train_batch_size=4", "rollout.n=2", "rollout.max_response_length=2"),
        *("actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=8"),
        *("actor.log_prob_micro_batch_size_per_gpu=8", f"reward.path={reward}"),
        *overrides,
    )
    assert done.returncode == 0, done.stderr


def test_a_grpo_run_gives_every_step_the_rows_as_read_and_a_resumed_run_the_same(tmp_path):
    data = _rows(tmp_path / "rows.jsonl")
    whole, resumed = tmp_path / "whole.jsonl", tmp_path / "resumed.jsonl"
    _grpo(
        tmp_path, _consuming_reward(tmp_path, whole), data, tmp_path / "a", "trainer.total_steps=3"
    )
    reward = _consuming_reward(tmp_path, resumed)
    for steps in (2, 3):  # stopped after step 2, then the same command resumed for step 3
        _grpo(tmp_path, reward, data, tmp_path / "b", f"trainer.total_steps={steps}")
    seen = [json.loads(line) for line in whole.read_text().splitlines()]
    assert len(seen) == 3 * 4 * 2  # 3 steps of 4 prompts' 2 responses
    assert {tuple(call[1:]) for call in seen} == {(TESTS, 1, 2)}
    assert resumed.read_text() == whole.read_text()
