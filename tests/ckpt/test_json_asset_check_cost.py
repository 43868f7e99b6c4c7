"""The JSON asset check (`check_json_asset`) of a large tokenizer.json costs about one
`json.loads`: a 64 MB one took ~43 s to refuse, most of it a Python step per value (a key
given twice looked for in Python for every key; then every value walked with its key path,
to find a NaN). Now the keys are counted by `dict` in C, and nesting and NaN are found a
level at a time in C steps (`mfsdp_ckpt/storage/unique_json.py`); the Python steps a check
takes no longer grow with the file's values (bench/json_asset_check.py times it). The same
files are refused with the same lines."""

from __future__ import annotations

import json
import math
import random
import sys

import pytest

from mfsdp_ckpt.convert.export_source import check_json_asset
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.unique_json import (
    MAX_JSON_DEPTH,
    DuplicateKeyError,
    NestingError,
    first_nonfinite,
    loads_unique,
)

ENTRIES = 20_000


def _tokenizer_json(ending: str = "") -> bytes:
    vocab = ", ".join(f'"tok{i}": {i}' for i in range(ENTRIES))
    merges = ", ".join(f'["tok{i}", "x"]' for i in range(ENTRIES))
    model = f'{{"type": "BPE", "vocab": {{{vocab}{ending}}}, "merges": [{merges}]}}'
    return f'{{"version": "1.0", "added_tokens": [], "model": {model}}}'.encode()


def _python_calls(run) -> int:
    """How many Python functions `run()` calls (C functions not counted)."""
    calls = 0

    def count(_frame, event, _arg):
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("ending", ["", ', "tok-nan": NaN', ', "tok0": 7'])
def test_python_steps_of_the_check_do_not_grow_with_the_values(ending):
    """A tokenizer.json of 40,000 values (valid, a NaN last, a key given twice last) is
    checked in far fewer Python calls than it has values: each step a Python call per
    value or per key took made the check many times a parse."""

    data = _tokenizer_json(ending)
    refused: list[str] = []

    def check() -> None:
        try:
            check_json_asset("tokenizer.json", "tokenizer.json", data)
        except CheckpointFileError as err:
            refused.append(str(err))

    assert _python_calls(check) < ENTRIES // 20
    assert len(refused) == (1 if ending else 0), refused


@pytest.mark.parametrize(
    ("ending", "said"),
    [
        (', "tok-nan": NaN', "tokenizer.json: model.vocab.tok-nan is nan, not a finite number"),
        (', "tok-inf": 1e999', "tokenizer.json: model.vocab.tok-inf is inf, not a finite number"),
        (', "tok0": 7', "tokenizer.json: key 'tok0' appears twice in one object"),
    ],
)
def test_one_bad_value_at_the_end_is_refused_naming_its_key(ending, said):
    with pytest.raises(CheckpointFileError) as refused:
        check_json_asset("tokenizer.json", "tokenizer.json", _tokenizer_json(ending))
    assert str(refused.value).startswith(said), refused.value


def _reference_first_nonfinite(data, where=""):
    """The first NaN or Infinity in document order, walked one value at a time."""
    if isinstance(data, float) and not math.isfinite(data):
        return where, data
    if isinstance(data, dict):
        items = [(f"{where}.{key}" if where else key, value) for key, value in data.items()]
    elif isinstance(data, list):
        items = [(f"{where}[{index}]", value) for index, value in enumerate(data)]
    else:
        items = []
    for path, value in items:
        found = _reference_first_nonfinite(value, path)
        if found is not None:
            return found
    return None


def _random_json(chance: random.Random, depth: int = 0):
    pick = chance.random()
    if depth < 5 and pick < 0.3:
        return {f"k{i}": _random_json(chance, depth + 1) for i in range(chance.randrange(4))}
    if depth < 5 and pick < 0.6:
        return [_random_json(chance, depth + 1) for _ in range(chance.randrange(4))]
    return chance.choice([1, 2.5, "s", None, True, math.nan, math.inf, -math.inf, 0.0])


def test_the_first_nonfinite_found_is_the_first_in_the_file():
    chance = random.Random(7)
    found = 0
    for _ in range(500):
        data = _random_json(chance)
        expected = _reference_first_nonfinite(data)
        got = first_nonfinite(data)
        assert repr(got) == repr(expected), (data, got, expected)
        found += expected is not None
    assert 50 < found < 450  # both kinds were tried


def test_the_first_key_given_twice_is_named():
    with pytest.raises(DuplicateKeyError) as refused:
        loads_unique('{"a": 1, "b": 2, "b": 3, "a": 4}')
    assert refused.value.key == "b"
    assert loads_unique('{"a": {"a": 1}, "b": [{"a": 2}]}') == {"a": {"a": 1}, "b": [{"a": 2}]}


@pytest.mark.parametrize(
    ("text", "deeper"),
    [
        ("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, False),
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), True),
        ('{"a": ' * MAX_JSON_DEPTH + "1" + "}" * MAX_JSON_DEPTH, False),
        ('[{"a": ' * 50 + "1" + "}]" * 50, False),  # 100 deep
        ('[{"a": ' * 50 + "[]" + "}]" * 50, True),  # 101 deep, its innermost empty
    ],
)
def test_nesting_past_the_bound_is_refused_at_the_bound(text, deeper):
    if deeper:
        with pytest.raises(NestingError):
            loads_unique(text)
    else:
        assert loads_unique(text) == json.loads(text)
