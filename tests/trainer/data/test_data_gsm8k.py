import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.data_tables import read_rows
from trainer.rewards.gsm8k import compute_score

# Rows in the official openai/grade-school-math format (question, answer ending in "#### N").
GSM8K_ROWS = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half "
        "as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
        "Natalia sold 48+24 = <<48+24=72>>72 clips "
        "altogether in April and May.\n#### 72",
    },
    {
        "question": "A company pays $1,000 a week for 2 weeks. How much in total?",
        "answer": "1,000 * 2 = <<1000*2=2000>>2,000\n#### 2,000",
    },
]
MATH_ROWS = [
    {
        "problem": "What is $\\frac{1}{2} + \\frac{1}{4}$?",
        "level": "Level 1",
        "type": "Prealgebra",
        "solution": "We have $\\frac{1}{2} + \\frac{1}{4} = \\boxed{\\frac{3}{4}}$.",
    },
]


def test_gsm8k_jsonl_to_sft_and_rl_parquet(tmp_path):
    source = tmp_path / "train.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in GSM8K_ROWS))
    result = CliRunner().invoke(
        app, ["data", "gsm8k", "--input", str(source), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    sft = read_rows(tmp_path / "out" / "sft" / "train.parquet")
    rl = read_rows(tmp_path / "out" / "rl" / "train.parquet")
    assert [m["role"] for m in sft[0]["messages"]] == ["user", "assistant"]
    assert sft[0]["messages"][1]["content"] == GSM8K_ROWS[0]["answer"]
    assert sft[0]["messages"][0]["content"].endswith('output the final answer after "####".')
    first = rl[0]
    assert set(first) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert first["data_source"] == "openai/gsm8k" and first["ability"] == "math"
    assert first["reward_model"] == {"style": "rule", "ground_truth": "72"}
    assert rl[1]["reward_model"]["ground_truth"] == "2000"
    assert first["extra_info"]["split"] == "train" and first["extra_info"]["index"] == 0
    assert first["prompt"] == [sft[0]["messages"][0]]
    # the reference answer scores 1.0 under the GSM8K reward for its own ground truth
    assert compute_score(GSM8K_ROWS[1]["answer"], rl[1]["reward_model"]["ground_truth"]) == 1.0


def test_gsm8k_parquet_input_and_split_option(tmp_path):
    source = tmp_path / "main-00000.parquet"
    pq.write_table(pa.Table.from_pylist(GSM8K_ROWS), source)
    result = CliRunner().invoke(
        app, ["data", "gsm8k", "--input", str(source), "--out", str(tmp_path), "--split", "test"]
    )
    assert result.exit_code == 0, result.output
    assert read_rows(tmp_path / "rl" / "test.parquet")[0]["extra_info"]["split"] == "test"


def test_math_boxed_answers(tmp_path):
    source = tmp_path / "test.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in MATH_ROWS))
    assert (
        CliRunner()
        .invoke(app, ["data", "math", "--input", str(source), "--out", str(tmp_path)])
        .exit_code
        == 0
    )
    row = read_rows(tmp_path / "rl" / "test.parquet")[0]
    assert row["reward_model"]["ground_truth"] == "\\frac{3}{4}"
    assert row["prompt"][0]["content"].endswith("within \\boxed{}.")


@pytest.mark.parametrize(
    "content, message",
    [
        (
            '{"question": "q", "answer": "no marker"}\n',
            "train.jsonl:1: answer has no '#### <number>' line",
        ),
        ('{"question": "q"}\n', "['answer'] missing or not text"),
        ('{"question": 5, "answer": "a #### 5"}\n', "['question'] missing or not text"),
        ('{"question": "q", "answer": ["a #### 5"]}\n', "['answer'] missing or not text"),
        ("not json\n", "not valid JSON"),
    ],
)
def test_bad_input_is_a_usage_error(tmp_path, content, message):
    source = tmp_path / "train.jsonl"
    source.write_text(content)
    result = CliRunner().invoke(
        app, ["data", "gsm8k", "--input", str(source), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert message in result.output and "train.jsonl" in result.output


@pytest.mark.parametrize(
    "command, content, message",
    [
        # nothing after the marker: a ground truth of '' (was accepted; "five" was refused)
        (
            "gsm8k",
            '{"question": "q", "answer": "x\\n#### "}\n',
            "train.jsonl:1: answer has no '#### <number>' line ('#### ' then digits, as the"
            " GSM8K reward reads a response's answer)",
        ),
        (
            "math",
            '{"problem": "p", "solution": "so \\\\boxed{ }"}\n',
            "train.jsonl:1: solution's last \\boxed{} is empty",
        ),
        # past Python's 4300-digit limit: was a ValueError traceback
        (
            "gsm8k",
            '{"question": "q", "answer": "#### 5", "n": ' + "9" * 5000 + "}\n",
            "train.jsonl:1: not valid JSON (an integer of more than 4300 digits)",
        ),
        # a lone surrogate: was pyarrow's UnicodeEncodeError traceback
        (
            "gsm8k",
            '{"question": "a\\ud800b", "answer": "#### 5"}\n',
            "train.jsonl:1: question holds '\\ud800' at character 1, a lone UTF-16 surrogate"
            " (half of a \\u escape pair), which is no text",
        ),
    ],
    ids=["empty-after-####", "empty-boxed", "5000-digits", "lone-surrogate"],
)
def test_a_row_is_refused_in_one_json_object_naming_it(tmp_path, command, content, message):
    source = tmp_path / "train.jsonl"
    source.write_text(content)
    result = CliRunner().invoke(
        app, ["data", command, "--input", str(source), "--out", str(tmp_path / "o"), "--json"]
    )
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {"error": f"{tmp_path}/{message}", "exit_code": 2}
    assert not (tmp_path / "o").exists()


def test_an_unknown_input_format_names_every_format_read(tmp_path):
    """The line said "(use .parquet or .jsonl)", though .json is read too (--help says so)."""
    (tmp_path / "t.txt").write_text("{}")
    (tmp_path / "t.json").write_text(json.dumps([{"question": "1+1?", "answer": "#### 2"}]))
    with pytest.raises(
        Exception, match=r"unknown data format '\.txt' \(use \.parquet, \.jsonl or \.json\)"
    ):
        read_rows(tmp_path / "t.txt")
    assert read_rows(tmp_path / "t.json")[0] == {"question": "1+1?", "answer": "#### 2"}


@pytest.mark.parametrize(
    "answer, truth",
    [
        ("w\n#### 1,234", "1234"),
        ("w\n#### -5", "-5"),
        ("w\n#### 72 dollars", "72"),
        ("w\n#### 7\nThat is all.", "7"),
        ("first #### 10 then\n#### 20", "10"),
    ],
)
def test_the_ground_truth_is_the_number_verl_extracts(answer, truth):
    """What followed `####` was kept whole ("72 dollars"): a ground truth the reward never
    matches, so every reward of the row was 0. verl's preprocessing takes the first match."""
    from trainer.data.math_datasets import gsm8k_ground_truth
    from trainer.rewards.gsm8k import compute_score

    assert gsm8k_ground_truth(answer) == truth
    assert compute_score(f"so #### {truth}", truth) == 1.0


@pytest.mark.parametrize("answer", ["w\n####72", "w\n#### $72", "w\n#### \uff17\uff12"])
def test_an_answer_without_the_rewards_pattern_is_refused(answer):
    from trainer.data.math_datasets import gsm8k_ground_truth

    with pytest.raises(ValueError, match="no '#### <number>' line"):
        gsm8k_ground_truth(answer)
