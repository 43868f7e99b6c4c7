"""A path's byte that is not UTF-8, and any other lone surrogate, is written by one rule
(`printable.escaped`) in a JSON string and in a text line alike: the two outputs of one
command name one path the same way."""

from __future__ import annotations

import json

import pytest

from cli.json_text import json_text, shown_bytes
from mfsdp_ckpt.check.printable import escaped, printable


@pytest.mark.parametrize(
    ("char", "written"),
    [
        ("\udcff", "\\xff"),  # os.fsdecode's surrogate for the byte 0xff
        ("\udc80", "\\x80"),
        ("\udc7f", "\\udc7f"),  # below surrogateescape's range: no byte of a path
        ("\ud800", "\\ud800"),  # a JSON file's lone "\ud800"
        ("\udfff", "\\udfff"),
    ],
)
def test_a_surrogate_is_written_alike_in_json_and_text(char, written):
    name = f"run{char}/ck"
    assert escaped(char) == written
    assert printable(name) == shown_bytes(name) == f"run{written}/ck"
    assert json.loads(json_text({"path": name})) == {"path": f"run{written}/ck"}


def test_other_characters_stay_as_json_writes_them():
    """`shown_bytes` rewrites surrogates only: JSON escapes a control character itself."""
    assert shown_bytes("a\x1bb é") == "a\x1bb é"
    assert printable("a\x1bb é") == "a\\x1bb é"
