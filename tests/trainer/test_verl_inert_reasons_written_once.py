"""Each reason `trainer.verl_inert_keys` gives for a verl key changing nothing here is
written once: a reason two keys share is a constant (`SPEED`, `SEEDED`), so rewording it
rewords it for every key, never leaving one key told the old words."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from trainer import verl_inert_keys


def test_no_reason_is_spelled_twice():
    tree = ast.parse(Path(verl_inert_keys.__file__).read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    said = Counter(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and " " in node.value
        and id(node) not in docstrings
    )
    assert [text for text, times in said.items() if times > 1] == []


def test_the_shared_reasons_reach_every_key_that_gives_them():
    reasons = {key: inert.why for key, inert in verl_inert_keys.INERT_KEYS.items()}
    for constant in (verl_inert_keys.SEEDED, verl_inert_keys.BY_ROLE, verl_inert_keys.HF_LOADS):
        assert list(reasons.values()).count(constant) >= 2, constant
