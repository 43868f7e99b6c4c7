"""A chat written out as text padded with lines holding only whitespace other than spaces,
tabs and carriage returns (a form feed, which Python's tokenizer skips; a vertical tab, an
ideographic space: anything str.strip() removes) is refused as chat turns written out: such
lines, more than the scan's bound on lines, read the padded chat as a plain prompt."""

from __future__ import annotations

import json
import sys

import pytest

from trainer.data import chat_as_text
from trainer.data.chat_as_text import chat_written_as_text

PAD = 2 * chat_as_text._MAX_TOKENS
TURNS = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}]
# every character str.strip() removes but the line break the lines are parted with
BLANKS = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace() and c != "\n")


@pytest.mark.parametrize("blank", ["\x0c", "\x0b", "\u3000", BLANKS])
def test_a_literal_chat_padded_with_whitespace_lines_is_refused(blank):
    text = "[" + repr(TURNS[0]) + "," + f"\n{blank}" * PAD + "\n" + repr(TURNS[1]) + "]"
    why = chat_written_as_text(text, "prompt")
    assert why is not None and why.startswith(
        "'prompt' is text holding chat turns written out as a Python literal"
    ), why


def test_a_json_chat_padded_with_form_feed_lines_is_refused():
    text = "[" + json.dumps(TURNS[0]) + "," + "\n\x0c" * PAD + "\n" + json.dumps(TURNS[1]) + "]"
    why = chat_written_as_text(text, "prompt")
    assert why is not None and why.startswith("'prompt' is text holding chat turns written out")
