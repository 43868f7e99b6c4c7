"""With `reward.path`, a row's null, NaN or empty `reward_model.ground_truth` loads and reaches
the function as it is, as verl's reward manager gives it (a judge's reward, or one whose
tests are in extra_info, needs none); it was refused as "ground_truth is null", a reason that
holds for the built-in rules alone, which still refuse it. A row with no ground_truth at all
is refused either way (verl's reward manager reads the key from every row)."""

import json
import math

import pytest

from tests.support.data_tables import write_parquet
from tests.support.interop_layouts import run_cli
from tests.support.paths import REPO
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.tiny import build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _row(index: int, truth) -> dict:
    return {
        "data_source": "my_judge",
        "prompt": [{"role": "user", "content": f"Write a haiku {index}"}],
        "reward_model": {"style": "model", "ground_truth": truth},
        "extra_info": {"index": index},
    }


def _jsonl(tmp_path, rows: list[dict]) -> str:
    path = tmp_path / "rl.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_a_null_or_empty_ground_truth_loads_for_a_custom_reward(tmp_path, tokenizer):
    path = _jsonl(tmp_path, [_row(0, None), _row(1, ""), _row(2, "  ")])
    prompts, _ = load_rl_prompts([path], RLDataConfig(), tokenizer, custom_reward=True)
    assert [prompt.ground_truth for prompt in prompts] == [None, "", "  "]
    with pytest.raises(RLDataError, match=r"rl\.jsonl:1: reward_model\.ground_truth is null$"):
        load_rl_prompts([path], RLDataConfig(), tokenizer)


def test_a_nan_ground_truth_loads_as_it_is_for_a_custom_reward(tmp_path, tokenizer):
    path = write_parquet([_row(0, math.nan)], tmp_path / "rl.parquet")
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), tokenizer, custom_reward=True)
    assert math.isnan(prompts[0].ground_truth)


def test_a_row_without_a_ground_truth_is_refused_for_a_custom_reward_too(tmp_path, tokenizer):
    row = _row(0, None)
    del row["reward_model"]["ground_truth"]
    path = _jsonl(tmp_path, [row])
    with pytest.raises(RLDataError, match=r"rl\.jsonl:1: no reward_model\.ground_truth$"):
        load_rl_prompts([path], RLDataConfig(), tokenizer, custom_reward=True)


def test_a_run_gives_the_function_the_null_ground_truth(tmp_path):
    seen = tmp_path / "seen.jsonl"
    reward = tmp_path / "judge.py"
    reward.write_text(
        "import json\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
        f"    with open({str(seen)!r}, 'a') as f:\n"
        "        f.write(json.dumps(ground_truth) + '\\n')\n"
        "    return 0.5\n"
    )
    data = _jsonl(tmp_path, [_row(index, None) for index in range(4)])
    code, out, err = run_cli(
        *("train", "grpo", "--config", REPO / "examples" / "grpo_tiny_cpu.yaml", "--json"),
        *(f"data.train_files={data}", f"trainer.run_dir={tmp_path / 'run'}"),
        *("data.val_files=[]", "trainer.total_steps=1", "data.train_batch_size=2"),
        *("rollout.n=2", "rollout.max_response_length=2", "actor.ppo_mini_batch_size=2"),
        *("actor.ppo_micro_batch_size_per_gpu=2", "actor.log_prob_micro_batch_size_per_gpu=2"),
        f"reward.path={reward}",
    )
    assert code == 0, err
    assert json.loads(out)["reward_mean"] == 0.5
    assert seen.read_text().splitlines() == ["null"] * 4
