"""A name that holds a non-ASCII letter looking like an ASCII one is printed with that letter
escaped: `model.norm.weight` with a Cyrillic o (U+043E) or a fullwidth n (U+FF4E) read as the
real name, and validate said that name was both missing and present. Words of ASCII alone, and
text of no ASCII at all, print as they are."""

from __future__ import annotations

import json

import pytest

from mfsdp_ckpt.check.printable import error_line, printable
from tests.support.fresh_python import mfsdp

CYRILLIC_O, FULLWIDTH_N, ACUTE = "\u043e", "\uff4e", "\u0301"
CYRILLIC_MODEL = "\u043c\u043e\u0434\u0435\u043b\u044c"  # a directory named in Russian


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        (
            f"[model.model.n{CYRILLIC_O}rm.weight]: missing",
            "[model.model.n\\u043erm.weight]: missing",
        ),
        (f"[model.{FULLWIDTH_N}orm.weight]", "[model.\\uff4eorm.weight]"),
        (f"model.norme{ACUTE}.weight", "model.norme\\u0301.weight"),
        ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight"),
        ("a…(+5 chars)…b — c", "a…(+5 chars)…b — c"),
        ("\u6570\u636e \u5df2\u4fdd\u5b58", "\u6570\u636e \u5df2\u4fdd\u5b58"),
        ("global_step_\uff12", "global_step_\\uff12"),
        ("/home/\u0438\u0432\u0430\u043d/run", "/home/\u0438\u0432\u0430\u043d/run"),
        ("/data/jos\u00e9/run", "/data/jos\u00e9/run"),
        ("/data/\u6570\u636e/run.jsonl", "/data/\u6570\u636e/run.jsonl"),
        (f"/data/{CYRILLIC_MODEL}1/x", f"/data/{CYRILLIC_MODEL}1/x"),
        ("/data/\u6570\u636e\uff11/x", "/data/\u6570\u636e\uff11/x"),
        ("global_step_\uff11\uff10\u3164", "global_step_\\uff11\\uff10\\u3164"),
        ("/data/\uff4e\uff4f\uff52\uff4d/x", "/data/\\uff4e\\uff4f\\uff52\\uff4d/x"),
    ],
)
def test_lookalikes_are_escaped_and_the_rest_kept(text, printed):
    assert printable(text) == printed


def test_an_error_line_escapes_them_too():
    err = KeyError(f"unknown tensor 'n{CYRILLIC_O}rm'")
    assert error_line(err) == "KeyError: \"unknown tensor 'n\\u043erm'\""


def test_a_json_error_keeps_the_real_name(tmp_path):
    """A program reads --json's `error` (a path it opens): escaping a lookalike there named a
    path that does not exist; the terminal's line escapes it."""
    missing = tmp_path / f"n{CYRILLIC_O}rm"
    done = mfsdp("ckpt", "validate", str(missing), "--json")
    assert done.returncode == 2, done.stderr
    assert str(missing) in json.loads(done.stdout)["error"]
    assert str(missing) not in done.stderr and "n\\u043erm" in done.stderr
