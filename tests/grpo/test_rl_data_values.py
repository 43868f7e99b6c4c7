"""RL rows whose values cannot train are refused before the model loads, naming file and row:
a null, NaN or empty ground truth with the built-in rewards (it scores 0 whatever the
response), one the built-in rules cannot compare (a list, a dict), an empty prompt; and
`rollout.temperature=0` is refused by the config check (it failed at step 1 with "gradient
norm is nan")."""

import json
import math

import pytest

from mfsdp_ckpt.errors import EXIT_USAGE
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.paths import REPO
from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig, RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.rewards.dispatch import RewardScorer
from trainer.tiny import build_tokenizer

PROMPT = [{"role": "user", "content": "What is 3 + 4?"}]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _rows(tmp_path, *rows: dict) -> str:
    path = tmp_path / "rl.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _row(truth=None, prompt=PROMPT, **fields) -> dict:
    return {
        "prompt": prompt,
        "data_source": "openai/gsm8k",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"index": 0},
        **fields,
    }


@pytest.mark.parametrize(
    "truth, why",
    [
        (None, "reward_model.ground_truth is null"),
        ("", "reward_model.ground_truth is empty text ('')"),
        ("  \n", "reward_model.ground_truth is empty text ('  \\n')"),
    ],
)
def test_a_null_or_empty_ground_truth_is_refused_naming_file_and_row(
    tmp_path, tokenizer, truth, why
):
    path = _rows(tmp_path, _row("7"), _row(truth))
    with pytest.raises(RLDataError) as raised:
        load_rl_prompts([path], RLDataConfig(), tokenizer)
    assert str(raised.value) == f"{path}:2: {why}"
    assert raised.value.exit_code == EXIT_USAGE


def test_a_nan_ground_truth_is_a_missing_one(tmp_path, tokenizer):
    from tests.support.data_tables import write_parquet

    path = write_parquet([_row(math.nan)], tmp_path / "rl.parquet")
    with pytest.raises(RLDataError, match=r"rl\.parquet row 1: reward_model\.ground_truth is NaN$"):
        load_rl_prompts([str(path)], RLDataConfig(), tokenizer)


@pytest.mark.parametrize(
    "truth, shown",
    [(["3", "4"], "list ['3', '4']"), ({"answer": "7"}, "dict {'answer': '7'}"), (True, "bool")],
)
def test_a_ground_truth_the_built_in_rules_cannot_compare_is_refused(
    tmp_path, tokenizer, truth, shown
):
    path = _rows(tmp_path, _row(truth))
    with pytest.raises(RLDataError) as raised:
        load_rl_prompts([path], RLDataConfig(), tokenizer)
    message = str(raised.value)
    assert message.startswith(f"{path}:1: reward_model.ground_truth is {shown}"), message
    assert "reward.path" in message and "\n" not in message


@pytest.mark.parametrize("truth", [["3", "4"], {"answer": "7", "unit": "apples"}, True])
def test_a_custom_reward_function_is_given_a_structured_ground_truth_unchanged(
    tmp_path, tokenizer, truth
):
    path = _rows(tmp_path, _row(truth))
    prompts, _ = load_rl_prompts([path], RLDataConfig(), tokenizer, custom_reward=True)
    assert prompts[0].ground_truth == truth


@pytest.mark.parametrize("truth", [7, 7.0])
def test_a_ground_truth_that_is_a_number_loads_and_scores(tmp_path, tokenizer, truth):
    path = _rows(tmp_path, _row(truth))
    prompts, _ = load_rl_prompts([path], RLDataConfig(), tokenizer)
    assert prompts[0].ground_truth == truth  # kept: a custom function would get it unchanged
    scores = RewardScorer()(
        ["openai/gsm8k", "lighteval/MATH"], ["#### 7", r"\boxed{7}"], [truth] * 2
    )
    assert scores.rewards == [1.0, 1.0]


@pytest.mark.parametrize(
    "prompt, why",
    [
        ("", "prompt is empty text ('')"),
        ("   ", "prompt is empty text ('   ')"),
        ([{"role": "user", "content": ""}], "prompt's turns are all empty text"),
        (
            [{"role": "system", "content": " "}, {"role": "user", "content": ""}],
            "prompt's turns are all empty text",
        ),
    ],
)
def test_an_empty_prompt_is_refused_naming_file_and_row(tmp_path, tokenizer, prompt, why):
    path = _rows(tmp_path, _row("7"), _row("7"), _row("7", prompt=prompt))
    with pytest.raises(RLDataError) as raised:
        load_rl_prompts([path], RLDataConfig(), tokenizer)
    assert str(raised.value) == f"{path}:3: {why}"


def test_a_prompt_with_text_in_any_turn_loads(tmp_path, tokenizer):
    turns = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": ""}]
    path = _rows(tmp_path, _row("7", prompt="3 + 4?"), _row("7", prompt=turns))
    prompts, dropped = load_rl_prompts([path], RLDataConfig(), tokenizer)
    assert len(prompts) == 2 and dropped == 0


def _grpo(tmp_path, *overrides):
    return run_cli(
        *("train", "grpo", "--config", REPO / "examples" / "grpo_tiny_cpu.yaml"),
        *(
            f"trainer.run_dir={tmp_path / 'run'}",
            "data.val_files=[]",
            "trainer.eval_every=0",
            "trainer.total_steps=1",
        ),
        *overrides,
    )


def test_a_grpo_run_on_null_ground_truths_is_refused_before_training(tmp_path):
    path = _rows(tmp_path, *[_row(None)] * 8)
    code, _, err = _grpo(tmp_path, f"data.train_files={path}")
    assert code == EXIT_USAGE, err
    one_error(err, f"{path}:1: reward_model.ground_truth is null")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("value", ["0", "0.0"])
def test_temperature_zero_is_refused_by_the_config_check_naming_the_key(value):
    with pytest.raises(ConfigError) as raised:
        load_config(GRPOConfig, None, [f"rollout.temperature={value}"])
    message = str(raised.value)
    assert "'rollout.temperature' must be > 0" in message and "greedy" in message
    assert "such as 0.1" in message and "\n" not in message
    assert raised.value.exit_code == EXIT_USAGE
    assert load_config(GRPOConfig, None, ["rollout.temperature=0.1"]).rollout.temperature == 0.1


def test_a_grpo_run_at_temperature_zero_is_refused_before_the_model_loads(tmp_path):
    path = _rows(tmp_path, *[_row("7")] * 8)
    code, out, err = _grpo(tmp_path, f"data.train_files={path}", "rollout.temperature=0", "--json")
    assert code == EXIT_USAGE, err
    line = one_error(err, "'rollout.temperature' must be > 0", "got 0")
    assert json.loads(out) == {"error": line.removeprefix("error: "), "exit_code": EXIT_USAGE}
    assert not (tmp_path / "run").exists()


def test_prompts_all_longer_than_max_prompt_length_are_named_not_the_batch_size(tmp_path):
    """`data.max_prompt_length=2` dropped all 100 prompts, and the run's error said
    `data.train_batch_size=8 exceeds the 0 usable training prompts`."""
    from tests.support.fresh_python import mfsdp

    path = _rows(tmp_path, *[_row("7")] * 3)
    done = mfsdp(
        "train",
        "grpo",
        "--config",
        str(REPO / "examples" / "grpo_tiny_cpu.yaml"),
        f"data.train_files=[{path}]",
        "data.val_files=[]",
        "trainer.eval_every=0",
        "data.max_prompt_length=2",
        f"trainer.run_dir={tmp_path / 'run'}",
    )
    assert done.returncode == EXIT_USAGE, done.stderr
    line = one_error(done.stderr)
    expected = f"error: {path}: all 3 prompts are longer than data.max_prompt_length=2"
    assert line.startswith(expected), line
    assert "(the shortest has " in line and "train_batch_size" not in line


def test_some_prompts_over_max_prompt_length_are_dropped_and_counted(tmp_path, tokenizer):
    short = _row("7", prompt=[{"role": "user", "content": "1"}])
    long = _row("7", prompt=[{"role": "user", "content": "word " * 200}])
    kept, dropped = load_rl_prompts(
        [_rows(tmp_path, short, long)], RLDataConfig(max_prompt_length=64), tokenizer
    )
    assert (len(kept), dropped) == (1, 1)
