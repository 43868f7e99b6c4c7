"""A reward function (or its file's import) that changes the working directory and does not
change back (a checker run in a temp dir) leaves the command's where it was: the run failed
at the end of the step on its own relative paths ("runs/x/metrics.jsonl: No such file or
directory"), naming nothing of the reward."""

from __future__ import annotations

import json
import os

import pytest

from tests.grpo.test_rewards import VERL_SIGNATURE
from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO
from trainer.grpo.synthetic import write_addition_data
from trainer.rewards.custom import RewardFunctionError
from trainer.rewards.dispatch import RewardScorer


@pytest.mark.parametrize(
    "top, body",
    [
        ("", "os.chdir(ELSEWHERE)\n    return 0.5"),
        ("os.chdir(ELSEWHERE)\n", "return 0.5"),  # at import
    ],
)
def test_a_reward_functions_chdir_is_undone(tmp_path, monkeypatch, top, body):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    file = tmp_path / "chdir.py"
    file.write_text(
        f"import os\nELSEWHERE = {str(tmp_path / 'elsewhere')!r}\n{top}\n"
        f"def compute_score({VERL_SIGNATURE}):\n    {body}\n"
    )
    assert RewardScorer(str(file))(["ok"], ["7"], ["7"]).rewards == [0.5]
    assert os.getcwd() == str(tmp_path)


def test_a_failing_reward_functions_chdir_is_undone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "chdir.py"
    file.write_text(
        f"import os\ndef compute_score({VERL_SIGNATURE}):\n    os.chdir('/')\n    1/0\n"
    )
    with pytest.raises(RewardFunctionError):
        RewardScorer(str(file))(["ok"], ["7"], ["7"])
    assert os.getcwd() == str(tmp_path)


def test_a_grpo_run_with_relative_paths_survives_its_reward_functions_chdir(tmp_path):
    files = write_addition_data(tmp_path / "data", digits=4)
    (tmp_path / "elsewhere").mkdir()
    reward = tmp_path / "chdir.py"
    reward.write_text(
        f"import os\ndef compute_score({VERL_SIGNATURE}):\n"
        f"    os.chdir({str(tmp_path / 'elsewhere')!r})\n    return 0.5\n"
    )
    done = mfsdp(
        *("train", "grpo", "--config", str(REPO / "examples" / "grpo_tiny_cpu.yaml"), "--json"),
        *(f"data.train_files={files['rl_train']}", "trainer.run_dir=runs/x"),
        *("data.val_files=[]", "trainer.total_steps=1", "data.train_batch_size=2"),
        *("rollout.n=2", "rollout.max_response_length=2", "actor.ppo_mini_batch_size=2"),
        *("actor.ppo_micro_batch_size_per_gpu=2", "actor.log_prob_micro_batch_size_per_gpu=2"),
        "reward.path=chdir.py",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_step"] == 1
    assert (tmp_path / "runs" / "x" / "metrics.jsonl").is_file()
