"""`messages` rows with the real Qwen2.5-Instruct and Qwen3 chat templates, against verl's
MultiTurnSFTDataset (tests/support/verl_multiturn.py, written from its code and rendering
through transformers' own apply_chat_template):

- Qwen3's `[user, assistant]`: verl's sanity check refuses it (the template gives the last
  assistant turn an empty think block, which the turn rendered alone lacks); it trains here
  as the template renders it whole, that block a target, and the run says so in a note. The
  docs said such rows were refused "as verl's False does", and nothing in the run told.
- Qwen3's `[user, assistant, user]`: verl trains it; it was refused, the line blaming a
  reasoning the row did not have and saying that verl refused it too.
- a chat opening with an assistant turn: the empty conversation before it was rendered,
  which Qwen2.5's template cannot (`messages[0]`), and the row was refused as one the
  template cannot render; verl trains it, its mask on the template's system prompt.
- OpenAI's tool-calling turn, content null: refused as content that is not text; verl
  trains it with Qwen2.5's template.
"""

from __future__ import annotations

import json
import logging

import pytest

from tests.support.real_chat_templates import qwen_tokenizer
from tests.support.verl_multiturn import verl_row
from trainer.config import DataConfig
from trainer.data.chat import (
    ChatColumns,
    ChatFormatError,
    row_limit,
    tokenize_chat,
    tokenize_sft_row,
)
from trainer.data.sft_dataset import load_sft_splits
from trainer.data.verl_turns import MASKED, UNTRAINED

U = {"role": "user", "content": "What is 2 + 2?"}
A = {"role": "assistant", "content": "#### 4"}
THANKS = {"role": "user", "content": "thanks"}
GREETING = {"role": "assistant", "content": "Hi! How can I help?"}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    ],
}
TOOL_CHAT = [
    {"role": "user", "content": "add 1 and 2"},
    CALL,
    {"role": "tool", "content": "3"},
    {"role": "assistant", "content": "#### 3"},
]


@pytest.fixture(scope="module")
def qwen3():
    return qwen_tokenizer("qwen3")


@pytest.fixture(scope="module")
def qwen25():
    return qwen_tokenizer("qwen2_5_instruct")


def _tokenized(tokenizer, messages):
    return tokenize_chat(tokenizer, messages, row_limit(tokenizer, "data.max_length", 1024))


def _trained(tokenizer, example) -> str:
    return tokenizer.decode([t for t, m in zip(example.input_ids, example.loss_mask) if m])


def _whole(tokenizer, messages) -> list[int]:
    return list(
        tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
    )


def test_qwen3_single_turn_trains_its_think_block_where_verl_refuses_it(qwen3):
    with pytest.raises(AssertionError):  # verl's sanity check
        verl_row(qwen3, [U, A])
    example = _tokenized(qwen3, [U, A])
    assert example.input_ids == _whole(qwen3, [U, A])
    assert _trained(qwen3, example) == "<think>\n\n</think>\n\n#### 4<|im_end|>\n"
    assert example.unlike_verl == UNTRAINED


def test_qwen3_chat_ending_with_a_user_turn_trains_as_verl_trains_it(qwen3):
    example = _tokenized(qwen3, [U, A, THANKS])
    assert (example.input_ids, example.loss_mask) == verl_row(qwen3, [U, A, THANKS])
    assert _trained(qwen3, example) == "#### 4<|im_end|>\n"
    assert example.unlike_verl == ""


def test_qwen3_chat_verl_refuses_is_refused_saying_why_truly(qwen3):
    chat = [U, A, THANKS, A]
    with pytest.raises(AssertionError):
        verl_row(qwen3, chat)
    with pytest.raises(ChatFormatError) as err:
        _tokenized(qwen3, chat)
    said = str(err.value)
    assert "turn 2 renders otherwise once later turns follow" in said
    assert "its turns rendered one at a time are not the chat rendered whole" in said
    assert "reasoning" not in said and "train with it" not in said


def test_a_chat_opening_with_an_assistant_turn_trains_its_reply(qwen25):
    chat = [GREETING, U, A]
    example = _tokenized(qwen25, chat)
    verl_ids, verl_mask = verl_row(qwen25, chat)
    assert example.input_ids == verl_ids
    assert _trained(qwen25, example) == "Hi! How can I help?<|im_end|>\n#### 4<|im_end|>\n"
    # verl's mask trains the default system prompt; here the generation prompt ends it
    assert "You are Qwen" in qwen25.decode([t for t, m in zip(verl_ids, verl_mask) if m])
    assert example.unlike_verl == MASKED


def test_a_chat_opening_with_an_assistant_turn_is_verls_where_no_system_prompt(qwen3):
    """Qwen3's template puts no system prompt first: the opening turn's mask is verl's."""
    chat = [GREETING, U, A, THANKS]
    example = _tokenized(qwen3, chat)
    assert (example.input_ids, example.loss_mask) == verl_row(qwen3, chat)
    assert example.unlike_verl == ""


def test_a_tool_calling_turn_with_null_content_trains_as_verl_trains_it(qwen25):
    row = {"messages": TOOL_CHAT}
    limit = row_limit(qwen25, "data.max_length", 1024)
    _, example = tokenize_sft_row(qwen25, row, ChatColumns(), limit)
    assert (example.input_ids, example.loss_mask) == verl_row(qwen25, TOOL_CHAT)
    assert '<tool_call>\n{"name": "add"' in _trained(qwen25, example)
    assert example.unlike_verl == ""


def test_null_content_without_tool_calls_is_refused_saying_what_to_write(qwen25):
    row = {"messages": [U, {"role": "assistant", "content": None}]}
    with pytest.raises(ChatFormatError, match='write "" for an empty one'):
        tokenize_sft_row(qwen25, row, ChatColumns(), row_limit(qwen25, "data.max_length", 1024))


def _load(tmp_path, tokenizer, chats, **data):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"messages": chat}) + "\n" for chat in chats))
    cfg = DataConfig(train_files=[str(path)], **{"max_length": 1024, **data})
    return load_sft_splits(cfg, tokenizer, seed=0, progress=False)


def test_the_run_says_how_many_rows_train_unlike_verl(tmp_path, qwen3, caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.data"):
        _load(tmp_path, qwen3, [[U, A, THANKS], [U, A], [GREETING, U, A, THANKS], [U, A]])
    notes = [r.getMessage() for r in caplog.records if "verl" in r.getMessage()]
    assert len(notes) == 1
    assert "2 of 4 rows (first " in notes[0] and "train.jsonl:2) train here though verl" in notes[0]


def test_the_note_of_other_masks_counts_them(tmp_path, qwen25, caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.data"):
        _load(tmp_path, qwen25, [[U, A], [GREETING, U, A]])
    (note,) = [r.getMessage() for r in caplog.records if "verl" in r.getMessage()]
    assert "1 of 2 rows (first " in note and "train.jsonl:2) trains other tokens than" in note


def test_notes_are_the_first_ranks_only(tmp_path, qwen3, caplog, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")  # a rank of a group: RANK alone trains alone
    with caplog.at_level(logging.WARNING, logger="mfsdp.data"):
        _load(tmp_path, qwen3, [[U, A], [U, A, THANKS]])
    assert not [r for r in caplog.records if "note" in r.getMessage()]


@pytest.mark.parametrize(
    ("untrained", "said"),
    [(1, ": it trains nothing"), (3, "(and 2 more rows): they train nothing")],
)
def test_the_untrained_rows_note_counts_them_in_words(tmp_path, qwen25, caplog, untrained, said):
    long_prompt = {"role": "user", "content": "What is 2 + 2? " * 40}
    chats = [[long_prompt, A]] * untrained + [[U, A]]
    with caplog.at_level(logging.WARNING, logger="mfsdp.data"):
        _load(tmp_path, qwen25, chats, max_length=100, truncation="right")
    (note,) = [
        r.getMessage()
        for r in caplog.records
        if "train nothing" in r.getMessage() or "trains nothing" in r.getMessage()
    ]
    assert note.endswith(said) and "+0" not in note
