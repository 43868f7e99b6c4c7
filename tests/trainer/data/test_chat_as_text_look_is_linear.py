"""Looking at a prompt cell for chat turns written out (`chat_written_as_text`) costs time
linear in the cell's length, however many of numpy's cut marks or line breaks it holds.

Was: each comma numpy's `str()` leaves out between items (one per `...`) was put back by
copying the whole text, so a 6 MB cell with 12,000 `...` took 52 s in `mfsdp config check`
(the bound on tokens is none on size: a turn's text is one token); and every line break
costs the scan a step of its own without making a token it counts, so a cell of 4 M line
breaks took 13 s (blank lines are now dropped in one pass before the scan, other lines
past the bound on tokens not scanned). A cell of a turn's long text is still looked at
whole: the turns of a chat written out are refused however long
(test_chat_as_text_parse_bounded.py).
"""

from __future__ import annotations

import time
import tokenize
from collections.abc import Callable, Iterator

import pytest

from trainer.data import chat_as_text
from trainer.data.chat_as_text import chat_written_as_text


def _cut_cell(length: int) -> str:
    """numpy's text of an array of turns whose one turn is `length` characters long, with a
    cut mark (`...`, its comma left out) per 512 of them: refused."""
    cuts = " ..." * (length >> 9)
    return f"[{{'role': 'user', 'content': '{'x' * length}'}}{cuts}]"


def _seconds(text: str) -> float:
    """The least of three looks' times at `text`, each of which refuses it."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        assert chat_written_as_text(text, "prompt")
        best = min(best, time.perf_counter() - start)
    return best


def test_cut_marks_cost_time_linear_in_the_cell():
    """16 times the length (and cut marks) costs about 16 times the time; putting each
    comma back by a copy of the text cost ~500 times. Bounded loosely at 64."""
    small, big = _seconds(_cut_cell(1 << 17)), _seconds(_cut_cell(1 << 21))
    assert big / small < 64, (small, big)


@pytest.fixture
def lines_read(monkeypatch) -> list[int]:
    """How many lines the scan reads, counted on the tokenizer's readline."""
    read = [0]
    real = tokenize.generate_tokens

    def counted(readline: Callable[[], str]) -> Iterator[tokenize.TokenInfo]:
        def line() -> str:
            read[0] += 1
            return readline()

        return real(line)

    monkeypatch.setattr(chat_as_text.tokenize, "generate_tokens", counted)
    return read


def test_blank_lines_are_not_scanned(lines_read):
    """Blank lines are dropped in one pass before the scan: the padded chat is refused."""
    breaks = 4 * chat_as_text._MAX_TOKENS
    text = "[{'role': 'user', 'content': 'hi'}" + "\n" * breaks + " ...]"
    assert chat_written_as_text(text, "prompt")
    assert lines_read[0] <= 4


def test_lines_are_not_scanned_past_the_token_bound(lines_read):
    lines = 4 * chat_as_text._MAX_TOKENS
    text = "[{'role': 'user', 'content': 'hi'}" + "\n1" * lines + " ...]"
    assert chat_written_as_text(text, "prompt") is None
    assert lines_read[0] <= chat_as_text._MAX_TOKENS


def test_a_chat_written_on_many_lines_is_still_refused(lines_read):
    """JSON written with indent holds a line per key: 1,000 turns are refused."""
    turns = ",\n".join('  {\n    "role": "user",\n    "content": "hi"\n  }' for _ in range(1000))
    assert chat_written_as_text(f"[\n{turns}\n]", "prompt")
    assert lines_read[0] > 4000
