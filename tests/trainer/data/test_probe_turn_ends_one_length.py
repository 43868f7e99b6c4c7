"""A chat template that renders only the first or last 5 characters of each turn renders
every turn of a long chat: the dropped-turn probe marked each turn's ends with its number,
so "zq1qz" fit in 5 characters and "zq10qz" did not, and turns 10 and on were judged left
out (a tool turn at index 11 refused though it renders). Every turn's ends are now of one
length in a chat, one letter up to 24 turns."""

from __future__ import annotations

import pytest

from trainer.data.chat import dropped_turns, row_limit
from trainer.tiny import build_tokenizer


def _chat(count: int) -> list[dict]:
    roles = ["user", "assistant"]
    return [{"role": roles[at % 2], "content": f"turn {at}"} for at in range(count)]


@pytest.mark.parametrize("end", ["[:5]", "[-5:]"])
def test_every_turn_of_a_long_chat_sliced_to_five_characters_is_rendered(end):
    tokenizer = build_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}[{{ m.role }}]{{ m.content" + end + " }}{% endfor %}"
    )
    limit = row_limit(tokenizer, "data.max_length", 4096)
    assert dropped_turns(tokenizer, _chat(24), limit) == ()


def test_a_turn_left_out_of_a_long_chat_is_still_found():
    tokenizer = build_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if loop.index0 != 11 %}[{{ m.role }}]{{ m.content }}"
        "{% endif %}{% endfor %}"
    )
    limit = row_limit(tokenizer, "data.max_length", 4096)
    assert dropped_turns(tokenizer, _chat(30), limit) == (11,)
