"""Every text prompt of a GRPO file is looked at for chat turns written out as text, so a
prompt that cannot be one is passed over without a scan: every form refused (JSON, a Python
literal, numpy's text of an array, CSV-quoted or not) starts with `[`, `array(` or a CSV
quote before one of them. The scan of each prompt for quoted keys had come back (60,000
plain 6 KB prompts 50 times slower). Counted here on the key patterns the scan runs."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from trainer.data import chat_as_text
from trainer.data.chat_as_text import chat_written_as_text

TURNS = '{"role": "user", "content": "hi"}'


class _Counted:
    """A key pattern that records each text it searches."""

    def __init__(self, pattern: re.Pattern[str], seen: list[str]) -> None:
        self.pattern, self.seen = pattern, seen

    def search(self, text: str) -> Any:
        self.seen.append(text)
        return self.pattern.search(text)


@pytest.fixture
def scanned(monkeypatch) -> list[str]:
    seen: list[str] = []
    keys = tuple(_Counted(key, seen) for key in chat_as_text._TURN_KEYS)
    monkeypatch.setattr(chat_as_text, "_TURN_KEYS", keys)
    return seen


@pytest.mark.parametrize(
    "text",
    [
        "Solve 2 + 3. " * 500,
        f"Here is a chat: [{TURNS}]",  # written out inside prose: a prompt
        'The JSON {"role": "user", "content": "x"} is one turn.',
        f"  array is a word; [{TURNS}]",
    ],
    ids=["plain", "prose-list", "prose-dict", "array-word"],
)
def test_a_prompt_that_cannot_be_turns_is_not_scanned(scanned, text):
    assert chat_written_as_text(text, "prompt") is None
    assert scanned == []


@pytest.mark.parametrize(
    "text",
    [
        f"[{TURNS}]",
        f"  array([{TURNS}], dtype=object)",
        f'"[{TURNS.replace(chr(34), 2 * chr(34))}]"',
    ],
    ids=["json", "numpy-repr", "csv-quoted"],
)
def test_a_written_list_is_scanned_and_refused(scanned, text):
    assert chat_written_as_text(text, "prompt") is not None
    assert scanned


WORDS = "the sum of two and three is five " * 200


@pytest.mark.parametrize(
    "text",
    [
        f"[{WORDS}{TURNS} {WORDS}]",
        json.dumps([*WORDS.split(), json.loads(TURNS)]),
        f"[Question] {WORDS}{TURNS}? [end]",
        f"[1, 2, 3] and {TURNS}",
        f"array(1, {TURNS})",
    ],
    ids=["prose-in-brackets", "json-list-of-words", "tagged", "list-then-prose", "array-word"],
)
def test_a_list_prompt_whose_first_item_cannot_be_a_turn_is_not_scanned(scanned, text):
    """A prompt that starts with `[` is scanned only where a turn can follow the opening
    and it closes as a list: such prompts had made a file's check half again slower."""
    assert chat_written_as_text(text, "prompt") is None
    assert scanned == []


@pytest.mark.parametrize(
    "text",
    [
        f"[\n   {TURNS}\n]",
        f"[# the chat\n{TURNS}]",
        f"[({TURNS})]",
        f"[... {TURNS}]",
        f"[array({TURNS})]",
        f"array(\n  [{TURNS}], dtype=object)",
    ],
    ids=["spaced", "comment-first", "parenthesized", "cut-first", "array-item", "spaced-array"],
)
def test_a_list_of_turns_opened_otherwise_is_still_refused(text):
    assert chat_written_as_text(text, "prompt") is not None
