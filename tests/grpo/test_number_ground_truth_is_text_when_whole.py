"""With the built-in rewards, which compare text as verl's do, a ground truth stored as a whole
number is its decimal text: an integer of any width, and a float that is exactly an integer
within 2**53 (pandas stores an integer column with a null in it as float64), `72` and `72.0`
as "72". Any other number, a Decimal or a bool is refused before the model loads, naming the
file, row and column, and by `default_compute_score`: its text is a guess (a float32 column's
0.1 reads 0.10000000149011612, which no answer matches, so a right answer scored 0). A custom
reward function is given the value unchanged."""

import json
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mfsdp_ckpt.errors import EXIT_USAGE
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.rewards.custom import RewardError
from trainer.rewards.dispatch import RewardScorer, default_compute_score
from trainer.tiny import build_tokenizer

PROMPT = [{"role": "user", "content": "What is 70 + 2?"}]
SOURCES_AND_RIGHT_ANSWERS = [("openai/gsm8k", "#### 72"), ("lighteval/MATH", r"\boxed{72}")]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _row(truth) -> dict:
    return {
        "prompt": PROMPT,
        "data_source": "openai/gsm8k",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"index": 0},
    }


def _parquet_of(tmp_path, truths: pa.Array):
    """A parquet file whose `reward_model.ground_truth` column is `truths`, typed as given."""
    rows = len(truths)
    reward_model = pa.StructArray.from_arrays(
        [pa.array(["rule"] * rows), truths], ["style", "ground_truth"]
    )
    table = pa.table(
        {
            "prompt": [PROMPT] * rows,
            "data_source": ["openai/gsm8k"] * rows,
            "reward_model": reward_model,
        }
    )
    path = tmp_path / "rl.parquet"
    pq.write_table(table, path)
    return path


def _right_answer_scores(tmp_path, tokenizer, truths: pa.Array) -> list[float]:
    prompts, _ = load_rl_prompts([str(_parquet_of(tmp_path, truths))], RLDataConfig(), tokenizer)
    truth = prompts[0].ground_truth
    sources, answers = zip(*SOURCES_AND_RIGHT_ANSWERS, strict=True)
    return RewardScorer()(list(sources), list(answers), [truth] * len(sources)).rewards


@pytest.mark.parametrize(
    "column_type",
    [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64()],
    ids=str,
)
def test_an_integer_column_of_any_width_loads_and_scores_as_its_text(
    tmp_path, tokenizer, column_type
):
    assert _right_answer_scores(tmp_path, tokenizer, pa.array([72], column_type)) == [1.0, 1.0]


@pytest.mark.parametrize("column_type", [pa.float64(), pa.float32()], ids=str)
def test_a_float_column_holding_a_whole_number_loads_and_scores_as_its_text(
    tmp_path, tokenizer, column_type
):
    """pandas writes an integer column with a null in it as float64: 72 is stored 72.0."""
    assert _right_answer_scores(tmp_path, tokenizer, pa.array([72.0], column_type)) == [1.0, 1.0]


@pytest.mark.parametrize(
    "truths, shown",
    [
        (pa.array([0.1], pa.float32()), "float 0.10000000149011612"),
        (pa.array([Decimal("72")], pa.decimal128(4, 0)), "Decimal Decimal('72')"),
    ],
    ids=["float32", "decimal"],
)
def test_a_parquet_ground_truth_with_no_one_text_is_refused_naming_row_and_column(
    tmp_path, tokenizer, truths, shown
):
    path = _parquet_of(tmp_path, truths)
    with pytest.raises(RLDataError) as raised:
        load_rl_prompts([str(path)], RLDataConfig(), tokenizer)
    message = str(raised.value)
    assert message.startswith(f"{path} row 1: reward_model.ground_truth is {shown}: "), message
    assert "write it as text" in message and "\n" not in message
    assert raised.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize(
    "truth, shown",
    [(5e-05, "float 5e-05"), (0.5, "float 0.5"), (2.0**53 + 2, "float 9007199254740994.0")],
)
def test_a_jsonl_fraction_or_unsafe_float_ground_truth_is_refused_naming_line(
    tmp_path, tokenizer, truth, shown
):
    path = tmp_path / "rl.jsonl"
    path.write_text(json.dumps(_row("72")) + "\n" + json.dumps(_row(truth)) + "\n")
    with pytest.raises(RLDataError) as raised:
        load_rl_prompts([str(path)], RLDataConfig(), tokenizer)
    message = str(raised.value)
    assert message.startswith(f"{path}:2: reward_model.ground_truth is {shown}: "), message


@pytest.mark.parametrize("truth", [72, 72.0, 0.5])
def test_a_custom_reward_function_is_given_the_number_unchanged(tmp_path, tokenizer, truth):
    path = tmp_path / "rl.jsonl"
    path.write_text(json.dumps(_row(truth)) + "\n")
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), tokenizer, custom_reward=True)
    assert prompts[0].ground_truth == truth and type(prompts[0].ground_truth) is type(truth)


@pytest.mark.parametrize("source, response", SOURCES_AND_RIGHT_ANSWERS)
@pytest.mark.parametrize(
    "truth",
    [72, 72.0, np.int8(72), np.uint32(72), np.int64(72), np.float32(72.0), np.float64(72.0)],
    ids=repr,
)
def test_the_built_in_rules_compare_a_whole_number_as_its_text(source, response, truth):
    assert default_compute_score(source, response, truth) == 1.0
    assert default_compute_score(source, response.replace("72", "71"), truth) == 0.0


@pytest.mark.parametrize(
    "truth",
    [0.5, 5e-05, np.float32(0.1), 2.0**54, float("inf"), Decimal("72"), True, np.bool_(True)],
    ids=repr,
)
def test_the_built_in_rules_refuse_a_ground_truth_with_no_one_text(truth):
    with pytest.raises(RewardError, match=r"^ground_truth is \w+ .*: .*write it as text"):
        default_compute_score("lighteval/MATH", r"\boxed{72}", truth)
