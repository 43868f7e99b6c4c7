"""A chat template that changes a turn's text (capitalizes, upper-cases or title-cases it,
trims it, writes it as JSON, replaces its underscores, slices or truncates it) renders the
turn: the dropped-turn probe (`dropped_turns`), which looked for each turn's marker as
written, judged such a system turn left out, and its row was refused as losing it. The
probe now looks for either end of a turn's marker, case aside; a turn the template does
leave out is still refused."""

from __future__ import annotations

import pytest

from trainer.data.chat import (
    ChatFormatError,
    chat_ids,
    dropped_turns,
    refuse_unrendered_turns,
    row_limit,
)
from trainer.tiny import build_tokenizer

CHANGES = [
    "|capitalize",
    "|upper",
    "|title",
    "|trim",
    "|tojson",
    "|replace('_', ' ')",
    "[:8]",
    "[-8:]",
    "|truncate(12)",
]
TURNS = [
    {"role": "system", "content": "answer in a box."},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4"},
]


def _tokenizer(system: str) -> object:
    """The tiny tokenizer, its template writing a system turn as `system` (jinja) does."""
    tokenizer = build_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m.role == 'system' %}" + system + "{% else %}"
        "[{{ m.role }}]{{ m.content }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    return tokenizer


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("generation", [False, True], ids=["reply", "prompt"])
def test_a_system_turn_whose_text_the_template_changes_is_rendered(change, generation):
    tokenizer = _tokenizer("<<SYS>>{{ m.content" + change + " }}<</SYS>>")
    turns = TURNS[:2] if generation else TURNS
    limit = row_limit(tokenizer, "data.max_length", 512)
    assert dropped_turns(tokenizer, turns, limit, generation) == ()
    text = chat_ids(tokenizer, turns, limit, add_generation_prompt=generation)["text"]
    refuse_unrendered_turns(tokenizer, turns, limit, text, add_generation_prompt=generation)


@pytest.mark.parametrize("change", ["", "|upper", "[:8]"])
def test_a_system_turn_left_out_is_still_refused(change):
    """The template writes a fixed text of its own for the system turn, not the turn's."""
    tokenizer = _tokenizer("<<SYS>>{{ 'Mfsdp_turn_probe 7f3a9c'" + change + " }}<</SYS>>")
    limit = row_limit(tokenizer, "data.max_length", 512)
    assert dropped_turns(tokenizer, TURNS, limit) == (0,)
    text = chat_ids(tokenizer, TURNS, limit)["text"]
    with pytest.raises(ChatFormatError, match=r"turn 1, role 'system': .* does not render it"):
        refuse_unrendered_turns(tokenizer, TURNS, limit, text)
