"""What a custom reward function writes below Python's `sys.stdout` (a checker run as a
subprocess, `os.write(1, ...)`) goes to stderr, as its prints do: stdout stays the command's
own, one JSON object under `--json`. Only `sys.stdout` was swapped, and file descriptor 1,
which children inherit, still led to the real stdout."""

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

# Bodies of compute_score, each writing a line below sys.stdout, then scoring (or failing).
BELOW_PYTHON = {
    "subprocess": (
        "import subprocess, sys\n"
        "    subprocess.run([sys.executable, '-c', \"print('checker: ok')\"], check=True)\n"
        "    return 1.0"
    ),
    "os.write": "import os\n    os.write(1, b'checker: ok\\n')\n    return 1.0",
    "raising": "import os\n    os.write(1, b'checker: ok\\n')\n    raise ValueError('bad row')",
    "async": None,  # an `async def` function: written while it is awaited
}


def _reward_file(tmp_path, kind: str):
    file = tmp_path / f"reward_{kind.replace('.', '_')}.py"
    if kind == "async":
        file.write_text(
            "import os\n\n"
            f"async def compute_score({VERL_SIGNATURE}):\n"
            "    os.write(1, b'checker: ok\\n')\n"
            "    return 1.0\n"
        )
    else:
        file.write_text(f"def compute_score({VERL_SIGNATURE}):\n    {BELOW_PYTHON[kind]}\n")
    return file


@pytest.mark.parametrize("kind", list(BELOW_PYTHON))
def test_what_a_reward_function_writes_below_python_goes_to_stderr(tmp_path, capfd, kind):
    os.write(1, b"before\n")  # the command's own output, before and after the call
    scorer = RewardScorer(str(_reward_file(tmp_path, kind)))
    if kind == "raising":
        with pytest.raises(RewardFunctionError, match="bad row"):
            scorer(["s"], ["7"], ["7"])
    else:
        assert scorer(["s"], ["7"], ["7"]).rewards == [1.0]
    os.write(1, b"after\n")
    out, err = capfd.readouterr()
    assert out == "before\nafter\n"
    assert "checker: ok\n" in err


def test_a_grpo_runs_json_is_one_object_when_its_reward_runs_a_subprocess(tmp_path):
    files = write_addition_data(tmp_path / "data", digits=4)
    done = mfsdp(
        *("train", "grpo", "--config", str(REPO / "examples" / "grpo_tiny_cpu.yaml"), "--json"),
        *(f"data.train_files={files['rl_train']}", f"trainer.run_dir={tmp_path / 'run'}"),
        *("data.val_files=[]", "trainer.total_steps=1", "data.train_batch_size=2"),
        *("rollout.n=2", "rollout.max_response_length=2", "actor.ppo_mini_batch_size=2"),
        *("actor.ppo_micro_batch_size_per_gpu=2", "actor.log_prob_micro_batch_size_per_gpu=2"),
        f"reward.path={_reward_file(tmp_path, 'subprocess')}",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_step"] == 1
    assert done.stderr.count("checker: ok") == 4  # each of the 2 prompts' 2 responses
