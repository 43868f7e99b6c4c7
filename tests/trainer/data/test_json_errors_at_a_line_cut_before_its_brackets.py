"""A JSONL line (or a .json file) cut before its closing brackets is named at its end, the
column just after its last character: one ending in its newline ("\\n" or "\\r\\n") was
reported at "column 1", Python's place past that newline, the one character certain to be
fine."""

from __future__ import annotations

import pytest

from tests.support.data_tables import read_rows
from trainer.data.files import DataFileError

GOOD = '{"question": "1+1?", "answer": "2"}\n'
WHOLE = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}'
# cut after its last string, after a comma, after a colon, after a key's quote: each cut
# ends outside any string, before an object or array is closed
CUTS = [WHOLE[:-2], WHOLE[:-1], WHOLE[: WHOLE.index(', {"role": "assistant"') + 1]]
CUTS += ['{"question": "2+2?", "answer":', '{"question": "2+2?"']


@pytest.mark.parametrize("end", ["\n", "\r\n", ""], ids=["lf", "crlf", "none"])
@pytest.mark.parametrize("cut", CUTS)
def test_a_line_cut_before_its_brackets_names_its_end(tmp_path, cut, end):
    path = tmp_path / "train.jsonl"
    path.write_bytes((GOOD + cut + end).encode())
    with pytest.raises(DataFileError) as err:
        read_rows(path)
    said = str(err.value)
    assert said.startswith(f"{path}:2: not valid JSON (")
    assert f"at column {len(cut) + 1}: the line ends before its object or array is closed)" in said


@pytest.mark.parametrize("end", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_a_json_file_cut_before_its_brackets_names_its_last_line(tmp_path, end):
    path = tmp_path / "train.json"
    last = ' {"question": "2+2?", "answer": "4"}'
    path.write_bytes(("[" + GOOD.strip() + "," + end + last + end).encode())
    with pytest.raises(DataFileError) as err:
        read_rows(path)
    assert f"at line 2, column {len(last) + 1}: the file ends before" in str(err.value)


def test_an_error_inside_the_line_keeps_its_column(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(GOOD + '{"question": "2+2?" "answer": "4"}\n')
    with pytest.raises(DataFileError) as err:
        read_rows(path)
    assert str(err.value).endswith("(Expecting ',' delimiter at column 21)")
