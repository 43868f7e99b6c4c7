"""A data table given to a command that does not read it says what it is and which command
takes it (trainer/data/table_kinds.py): `train grpo` on an SFT table `mfsdp data` wrote, or
on GSM8K's own file, and `data gsm8k` on an SFT messages file, listed only the columns found;
`train sft` on an RL table already named `train grpo`."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.cli_errors import one_error
from trainer.data.chat import ChatColumns, ChatFormatError, messages_of
from trainer.data.math_datasets import convert_files
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts

GSM8K_ROW = {"question": "What is 3 + 4?", "answer": "3 + 4 = 7\n#### 7"}
MATH_ROW = {"problem": "What is $3 + 4$?", "solution": "$\\boxed{7}$"}
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
        ({"text": "t"}, "(found: text)"),  # nothing known: the columns alone
    ],
)
def test_sft_names_the_command_for_a_table_it_does_not_read(row, hint):
    with pytest.raises(ChatFormatError) as err:
        messages_of(row, ChatColumns())
    assert str(err.value).endswith(hint), err.value


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
