"""A data file's bad JSON is named with its place: a JSONL line cut short said "not valid JSON
(Invalid control character at)", a phrase ending where Python's position was, naming a
character the user never wrote (the line's own newline, inside the string left open), with no
column to look at; a dropped comma or quote gave no column either."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.cli_errors import one_error
from tests.support.data_tables import read_rows
from trainer.data.files import DataFileError

GOOD = '{"question": "1+1?", "answer": "2\\n#### 2"}\n'


@pytest.mark.parametrize(
    "second, said",
    [
        (  # cut short: the line's newline falls inside the answer's string
            '{"question": "2+2?", "answer": "4\\n#### 4\n',
            "Invalid control character at column 42: the line ends inside a string",
        ),
        (  # the last line, cut short with no newline after it
            '{"question": "2+2?", "answer": "4',
            "Unterminated string starting at column 32: the line ends inside a string",
        ),
        (
            '{"question": "2+2?", "answer": "4\\n#### 4",}\n',
            "Expecting property name enclosed in double quotes at column 44",
        ),
        (  # a raw tab inside a string
            '{"question": "2+2?", "answer": "4\t#### 4"}\n',
            "Invalid control character at column 34: the string holds '\\t' as it is, which"
            " JSON writes escaped",
        ),
    ],
    ids=["cut-short", "cut-short-last", "trailing-comma", "raw-tab"],
)
def test_a_bad_jsonl_line_names_its_column_and_why(tmp_path, second, said):
    path = tmp_path / "train.jsonl"
    path.write_text(GOOD + second)
    with pytest.raises(DataFileError) as err:
        read_rows(path)
    assert str(err.value) == f"{path}:2: not valid JSON ({said})"


def test_a_json_array_cut_inside_a_string_names_its_line_and_column(tmp_path):
    path = tmp_path / "train.json"
    path.write_text('[{"question": "1+1?", "answer": "2"},\n {"question": "2+2?", "answer": "4\n}]')
    with pytest.raises(DataFileError) as err:
        read_rows(path)
    assert str(err.value) == (
        f"{path}: not valid JSON (Invalid control character at line 2, column 35: the line"
        " ends inside a string)"
    )


def test_a_data_command_says_it_in_one_line(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text(GOOD + '{"question": "2+2?", "answer": "4\\n#### 4\n' + GOOD)
    done = CliRunner().invoke(
        app, ["data", "gsm8k", "--input", str(path), "--out", str(tmp_path / "o")]
    )
    assert done.exit_code == 2, done.output
    one_error(done.stderr, f"{path}:2: not valid JSON", "column 42", "ends inside a string")
