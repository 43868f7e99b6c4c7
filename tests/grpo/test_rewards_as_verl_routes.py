"""The built-in rewards score each data_source as verl's `default_compute_score` does, and a row
no built-in rule can score is refused when the data loads, naming its file and row.

Were: `math_dapo` and `math` rows scored by the MATH `\\boxed{}` rule (0.0 for a right
`Answer: 34`, where verl pays 1.0 and charges -1.0 for a wrong one), `aime*` rows failed; the
GSM8K rule paid 1.0 for `#### 72.0`, `####72`, `#### $72` and `#### 0100` (verl: 0); and a row
of an unknown data_source failed the run at its first reward, after steps were saved, naming
no file.
"""

import json

import pytest

from mfsdp_ckpt.errors import EXIT_USAGE
from tests.support.cli_errors import one_error
from tests.support.data_tables import write_parquet
from tests.support.interop_layouts import run_cli
from tests.support.paths import REPO
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.rewards import gsm8k, math_dapo
from trainer.rewards.custom import RewardError
from trainer.rewards.dispatch import BUILT_IN, RewardScorer, default_compute_score
from trainer.tiny import build_tokenizer

DAPO_SOURCES = ["math_dapo", "math", "math_dapo_reasoning", "aime2024", "aime25"]


@pytest.mark.parametrize("source", DAPO_SOURCES)
def test_dapo_sources_score_the_last_answer_line_plus_or_minus_one(source):
    assert default_compute_score(source, "17*2=34.\nAnswer: 34", "34") == 1.0
    assert default_compute_score(source, "Answer: 33", "34") == -1.0
    assert default_compute_score(source, r"so \boxed{34}", "34") == 1.0  # no Answer: line
    assert default_compute_score(source, r"so \boxed{33}", "34") == -1.0
    assert default_compute_score(source, "Answer: 34", 34) == 1.0  # a number as its text


@pytest.mark.parametrize(
    "response, truth, score",
    [
        ("answer :  34", "34", 1.0),  # any case, spaces around the colon
        ("Answer: 33\nAnswer: 34", "34", 1.0),  # the last line
        ("Answer: 34\nAnswer: 33", "34", -1.0),
        ("Answer: x = 34", "34", 1.0),  # after the last `=`
        ("Answer: $\\frac12$", "\\frac{1}{2}", 1.0),  # shorthand braced, $ dropped
        ("Answer: \\boxed{1,000}", "1000", 1.0),  # a whole number's commas go
        ("Answer: 12 inches", "12", 1.0),  # units dropped
        ("Answer: 34\n" + "x" * 300, "34", -1.0),  # only the last 300 characters
        ("Answer: 0.5", "\\frac{1}{2}", -1.0),  # text, not value: as verl
    ],
)
def test_the_dapo_rule_normalizes_as_verl(response, truth, score):
    assert math_dapo.compute_score(response, truth) == score


def test_a_wrong_dapo_answer_is_a_negative_reward_and_no_accuracy():
    scores = RewardScorer()(["math_dapo", "aime2024"], ["Answer: 3", "Answer: 4"], ["3", "5"])
    assert scores.rewards == [1.0, -1.0]
    assert scores.accuracy == [1.0, 0.0]


@pytest.mark.parametrize(
    "response, truth",
    [
        ("#### 12345678901234567890", "12345678901234567891"),  # text, not a float
        ("####72", "72"),  # `#### ` needs its space
        ("#### 0100", "100"),
        ("#### 72.0", "72"),
        ("#### 5.", "5"),
        ("#### $72", "72"),  # `$` is not taken in
        ("#### 72", " 72"),  # the ground truth as it is
    ],
)
def test_gsm8k_pays_only_where_verls_strict_rule_does(response, truth):
    assert gsm8k.compute_score(response, truth) == 0.0
    assert default_compute_score("openai/gsm8k", response, truth) == 0.0


def test_gsm8k_answers_verls_strict_rule_pays():
    assert gsm8k.compute_score("so #### 1,000", "1000") == 1.0
    assert gsm8k.compute_score("#### -3 ... #### 72", "72") == 1.0
    assert gsm8k.compute_score("#### 72.5", "72.5") == 1.0


@pytest.mark.parametrize(
    "source, verl_rule",
    [
        ("gsm8k", ""),  # verl routes only openai/gsm8k
        ("mystery", ""),
        ("numina_olympiads", " (verl's prime_math rule, not built in here)"),
        ("hiyouga/geometry3k", " (verl's geo3k rule, not built in here)"),
    ],
)
def test_a_source_without_a_built_in_rule_is_refused_by_the_rule(source, verl_rule):
    with pytest.raises(RewardError) as raised:
        default_compute_score(source, "#### 5", "5")
    assert str(raised.value) == (
        f"no built-in reward for data_source {source!r}{verl_rule} (built in: {BUILT_IN}); "
        "set reward.path and reward.name to score it"
    )


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _row(source: object = "openai/gsm8k") -> dict:
    row = {
        "prompt": [{"role": "user", "content": "What is 3 + 4?"}],
        "reward_model": {"style": "rule", "ground_truth": "7"},
        "extra_info": {"index": 0},
    }
    return row if source is None else {"data_source": source, **row}


def _jsonl(tmp_path, rows: list[dict]) -> str:
    path = tmp_path / "rl_mixed.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _refused(files: list[str], tokenizer) -> str:
    with pytest.raises(RLDataError) as raised:
        load_rl_prompts(files, RLDataConfig(), tokenizer)
    assert raised.value.exit_code == EXIT_USAGE
    return str(raised.value)


def test_a_jsonl_row_without_a_built_in_reward_is_refused_by_its_line(tmp_path, tokenizer):
    rows = [_row(), _row("math_dapo"), _row("aime2024"), _row("lighteval/MATH")] * 2
    path = _jsonl(tmp_path, [*rows[:7], _row("custom_set"), *rows[7:]])
    assert _refused([path], tokenizer) == (
        f"{path}:8: no built-in reward for data_source 'custom_set' (built in: {BUILT_IN}); "
        "set reward.path and reward.name to score it"
    )


@pytest.mark.parametrize("suffix", [".parquet", ".json"])
def test_a_table_row_without_a_built_in_reward_is_refused_by_its_index(tmp_path, tokenizer, suffix):
    rows = [_row(), _row(), _row("gsm8k")]
    path = tmp_path / f"rl{suffix}"
    if suffix == ".parquet":
        write_parquet(rows, path)
    else:
        path.write_text(json.dumps(rows))
    message = _refused([str(path)], tokenizer)
    assert message.startswith(f"{path} row 3: no built-in reward for data_source 'gsm8k' ")


@pytest.mark.parametrize(
    "row, why",
    [
        (_row(None), "no 'data_source' column (it picks the built-in reward; set reward.path"),
        (_row(7), "data_source is int 7, not text (a reward function is given it as text)"),
        (_row(""), "no built-in reward for data_source '' (built in: "),
    ],
)
def test_a_missing_or_odd_data_source_is_refused(tmp_path, tokenizer, row, why):
    path = _jsonl(tmp_path, [_row(), row])
    assert _refused([path], tokenizer).startswith(f"{path}:2: {why}")


def test_a_custom_reward_function_takes_any_data_source(tmp_path, tokenizer):
    path = _jsonl(tmp_path, [_row("custom_set"), _row(None), _row("gsm8k")])
    prompts, _ = load_rl_prompts([path], RLDataConfig(), tokenizer, custom_reward=True)
    assert [prompt.data_source for prompt in prompts] == ["custom_set", "", "gsm8k"]


def test_a_grpo_run_on_an_unknown_data_source_is_refused_before_the_model_loads(tmp_path):
    path = _jsonl(tmp_path, [_row()] * 7 + [_row("custom_set")])
    code, _, err = run_cli(
        *("train", "grpo", "--config", REPO / "examples" / "grpo_tiny_cpu.yaml"),
        *(f"trainer.run_dir={tmp_path / 'run'}", "data.val_files=[]", "trainer.total_steps=1"),
        f"data.train_files={path}",
    )
    assert code == EXIT_USAGE, err
    one_error(err, f"{path}:8: no built-in reward for data_source 'custom_set'")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
