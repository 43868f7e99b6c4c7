"""A JSON error's place is named once: Python's "Invalid control character at" ends in "at",
and the message read "... at at line 1, column 9"."""

import json

import pytest

from mfsdp_ckpt.storage.unique_json import json_problem


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"a": "b\n"}', "Invalid control character at line 1, column 9"),
        ('{"a": "b', "Unterminated string starting at line 1, column 7"),
        ('{"a": 1,}', "Expecting property name enclosed in double quotes at line 1, column 9"),
    ],
)
def test_the_place_follows_the_message_once(text: str, words: str) -> None:
    with pytest.raises(json.JSONDecodeError) as err:
        json.loads(text)
    assert json_problem(err.value) == words
