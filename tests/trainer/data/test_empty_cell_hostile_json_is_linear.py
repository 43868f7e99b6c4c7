"""`holds_nothing` reads JSON text up to 64 KiB, first counting its bracket depth outside
strings. That count took a pattern for JSON strings that, on an unclosed one of escaped
quotes, was retried from every quote to the end: one 64 KiB `extra_info.tools_kwargs` cell
cost half a minute of `mfsdp config check` (a 16 KiB one over 2 s). The count is one pass;
the depth bound still holds, and brackets inside strings (escaped quotes too) do not count."""

from __future__ import annotations

import time

import pytest

from trainer.data.empty_cells import JSON_TEXT_MAX, MAX_DEPTH, holds_nothing

HOSTILE = "[" * (MAX_DEPTH + 1) + '"' + '\\"' * ((JSON_TEXT_MAX - MAX_DEPTH - 2) // 2)


def test_an_unclosed_string_of_escaped_quotes_is_judged_at_once():
    assert len(HOSTILE) <= JSON_TEXT_MAX
    start = time.perf_counter()
    assert not holds_nothing(HOSTILE, nested=True)  # no JSON: a value
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    ("text", "nothing"),
    [
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), False),  # too deep: a value
        ('{"a": "' + "[" * 300 + '"}', False),  # brackets in a string: a dict with a value
        ('{"a": null, "b": "' + '\\"[' * 300 + '"}', False),  # escaped quotes in it
        ('{"a": null, "' + "{" * 150 + '": null}', True),  # brackets in a key: nothing
        ('{"a": "\\\\", "b": null, "c": ' + "[" * 10 + "]" * 10 + "}", False),
    ],
)
def test_depth_is_counted_outside_strings(text, nothing):
    assert holds_nothing(text, nested=True) is nothing
