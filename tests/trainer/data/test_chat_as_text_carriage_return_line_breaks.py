"""A chat written out as text whose lines end in \\r or \\r\\n (old Mac or Windows line
ends, or \\r\\r) is refused as chat turns written out, as the same text with \\n is.

Was: the scan's tokenizer and its line count split on \\n alone, so a \\r inside what it read
as one line stopped the scan and the JSON chat `[\\r  {\\r    "role": ...` trained as one
user turn of literal brackets and keys, exit 0.
"""

from __future__ import annotations

import json

import pytest

from trainer.data import chat_as_text
from trainer.data.chat_as_text import chat_written_as_text

TURNS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
FORMS = {
    "json": (json.dumps(TURNS, indent=2), "JSON"),
    # numpy's str() of an array of turns: items parted by a line break, no comma
    "numpy": ("[" + "\n ".join(map(repr, TURNS)) + "]", "numpy's text of an array"),
    "literal": ("[\n" + ",\n\n".join(map(repr, TURNS)) + "\n]", "a Python literal"),
}
LINE_ENDS = ["\r", "\r\r", "\r\n", "\r\n\r\n", "\r \r", "\n\r"]


@pytest.mark.parametrize("end", LINE_ENDS, ids=repr)
@pytest.mark.parametrize("form", list(FORMS))
def test_a_chat_with_other_line_ends_is_refused_as_with_newlines(form, end):
    text, named = FORMS[form]
    assert chat_written_as_text(text, "prompt") is not None  # the \n form, refused before
    why = chat_written_as_text(text.replace("\n", end), "prompt")
    assert why is not None and why.startswith(
        f"'prompt' is text holding chat turns written out as {named}"
    ), why


def test_carriage_return_lines_past_the_bound_are_not_scanned():
    """A line ended by \\r counts against the bound on lines as one ended by \\n does."""
    lines = 4 * chat_as_text._MAX_TOKENS
    text = "[{'role': 'user', 'content': 'hi'}" + "\r1" * lines + " ...]"
    assert chat_written_as_text(text, "prompt") is None


def test_a_prompt_with_carriage_returns_still_reads_as_text():
    assert chat_written_as_text("Sum these:\r[1, 2]\r\n{3}", "prompt") is None
