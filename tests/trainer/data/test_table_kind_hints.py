"""A data table given to a command that does not read it says what it is and which command
takes it (trainer/data/table_kinds.py): `train grpo` on an SFT table `mfsdp data` wrote, or
on GSM8K's own file, and `data gsm8k` on an SFT messages file, listed only the columns found;
`train sft` on an RL table already named `train grpo`."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.cli_errors import one_error
from trainer.config import DataConfig, SFTConfig, load_config
from trainer.data.chat import ChatColumns, ChatFormatError, messages_of
from trainer.data.math_datasets import convert_files
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.tiny import build_tokenizer

GSM8K_ROW = {"question": "What is 3 + 4?", "answer": "3 + 4 = 7\n#### 7"}
MATH_ROW = {"problem": "What is $3 + 4$?", "solution": "$\\boxed{7}$"}
GENERAL_KEYS = (
    "; to read other columns: data.prompt_key=COL data.response_key=COL, or"
    " data.messages_key=COL for a column of chat turns"
)
NO_TOKENIZER = SimpleNamespace(get_vocab=dict)  # the rows are refused before any is tokenized


@pytest.fixture
def tables(tmp_path) -> dict[str, str]:
    """`mfsdp data gsm8k`'s SFT and RL tables, and GSM8K's and MATH's own rows, as files."""
    source = tmp_path / "train.jsonl"
    source.write_text(json.dumps(GSM8K_ROW) + "\n")
    written = convert_files("gsm8k", [str(source)], tmp_path / "data")
    math = tmp_path / "math.jsonl"
    math.write_text(json.dumps(MATH_ROW) + "\n")
    return {
        "sft": str(written["sft/train"]),
        "rl": str(written["rl/train"]),
        "gsm8k": str(source),
        "math": str(math),
    }


@pytest.mark.parametrize(
    "table, hint",
    [
        ("sft", "; an SFT table (chat `messages`): `mfsdp train sft` reads it"),
        (
            "gsm8k",
            "; convert GSM8K's own rows (question, answer) with"
            " `mfsdp data gsm8k --input FILE --out DIR`",
        ),
        (
            "math",
            "; convert MATH's own rows (problem, solution) with"
            " `mfsdp data math --input FILE --out DIR`",
        ),
    ],
)
def test_grpo_names_the_command_for_a_table_it_does_not_read(tables, table, hint):
    with pytest.raises(RLDataError) as err:
        load_rl_prompts([tables[table]], RLDataConfig(), NO_TOKENIZER)
    message = str(err.value)
    where = ":1" if tables[table].endswith(".jsonl") else " row 1"  # a line, or a row from 1
    assert message.startswith(f"{tables[table]}{where}: no 'prompt' column (found "), message
    assert message.endswith(hint), message


@pytest.mark.parametrize(
    "row, hint",
    [
        ({"reward_model": {}, "prompt": "p"}, "`mfsdp train grpo` reads it"),
        (GSM8K_ROW, "`mfsdp data gsm8k --input FILE --out DIR`"),
        (MATH_ROW, "`mfsdp data math --input FILE --out DIR`"),
        ({"text": "t"}, "(found: text)" + GENERAL_KEYS),  # nothing known: the keys alone
    ],
)
def test_sft_names_the_command_for_a_table_it_does_not_read(row, hint):
    with pytest.raises(ChatFormatError) as err:
        messages_of(row, ChatColumns())
    assert str(err.value).endswith(hint), err.value


QA_ROW = {"question": "What is 3 + 4?", "answer": "7"}  # no `#### 7`: not GSM8K's own


def _sft_keys_said(path: str) -> tuple[str, list[str]]:
    """The error `train sft`'s data loading gives for `path`, and the `data.*=...` keys it
    names."""
    with pytest.raises(ChatFormatError) as err:
        load_sft_splits(DataConfig(train_files=[path], val_ratio=0), build_tokenizer(), 0, False)
    return str(err.value), re.findall(r"data\.\w+=[^\s;]+", str(err.value))


def _trains_with(path: str, keys: list[str]) -> list[str]:
    """The assistant text of each row of `path` as `train sft` reads it with `keys` given."""
    cfg = load_config(SFTConfig, None, [f"data.train_files=[{path}]", "data.val_ratio=0", *keys])
    tokenizer = build_tokenizer()
    train, _ = load_sft_splits(cfg.data, tokenizer, 0, False)
    return [
        tokenizer.decode([t for t, m in zip(row.input_ids, row.loss_mask) if m]) for row in train
    ]


@pytest.mark.parametrize(
    "rows, keys, taught",
    [
        ([QA_ROW], ["data.prompt_key=question", "data.response_key=answer"], "7"),
        ([GSM8K_ROW], ["data.prompt_key=question", "data.response_key=answer"], "#### 7"),
        ([MATH_ROW], ["data.prompt_key=problem", "data.response_key=solution"], "\\boxed{7}"),
    ],
    ids=["question-answer", "gsm8k", "math"],
)
def test_sft_names_the_keys_that_read_a_tables_own_columns(tmp_path, rows, keys, taught):
    """A question/answer table was sent to `mfsdp data gsm8k`, which refuses answers without
    `#### n`; the keys that read it as it is were named nowhere."""
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    message, named = _sft_keys_said(str(path))
    assert named == keys, message
    assert ("mfsdp data gsm8k" in message) == (rows[0] is GSM8K_ROW), message
    assert all(taught in text for text in _trains_with(str(path), named))


def test_sft_names_verls_sft_form_of_its_rl_table(tables):
    """verl trains SFT on its GSM8K RL parquet through extra_info and *_dict_keys: the error
    said only that `train grpo` reads it."""
    message, named = _sft_keys_said(tables["rl"])
    assert named == [
        "data.prompt_key=extra_info",
        "data.response_key=extra_info",
        "data.prompt_dict_keys=[question]",
        "data.response_dict_keys=[answer]",
    ], message
    assert message.endswith("`mfsdp train grpo` reads it"), message
    assert _trains_with(tables["rl"], named)[0].startswith(GSM8K_ROW["answer"])


def test_a_question_answer_table_without_gsm8k_answers_is_sent_to_no_converter(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps(QA_ROW) + "\n")
    with pytest.raises(RLDataError) as err:
        load_rl_prompts([str(path)], RLDataConfig(), NO_TOKENIZER)
    assert str(err.value).endswith("(found ['answer', 'question'])"), err.value
    done = CliRunner().invoke(
        app, ["data", "math", "--input", str(path), "--out", str(tmp_path / "o")]
    )
    assert "mfsdp data gsm8k" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "dataset, table, hint",
    [
        (
            "gsm8k",
            "sft",
            "; already converted: an SFT table (chat `messages`), which `mfsdp train sft`"
            " reads as it is",
        ),
        (
            "math",
            "rl",
            "; already converted: a verl RL table (prompts and rewards), which"
            " `mfsdp train grpo` reads as it is",
        ),
        ("math", "gsm8k", "with `mfsdp data gsm8k --input FILE --out DIR`"),
        ("gsm8k", "math", "with `mfsdp data math --input FILE --out DIR`"),
    ],
)
def test_data_names_what_a_table_of_another_kind_is(tables, tmp_path, dataset, table, hint):
    done = CliRunner().invoke(
        app, ["data", dataset, "--input", tables[table], "--out", str(tmp_path / "again")]
    )
    assert done.exit_code == 2, done.output
    line = one_error(done.stderr, tables[table], "missing or not text")
    assert line.endswith(hint), line
