"""A chat turn whose role the chat template does not render (Qwen2.5's renders system, user,
assistant and tool only) trained as if the row lacked it: a `function` turn holding a tool's
result was left out of the text, and the model learned to make the result up. Such a turn
is refused, naming its number and role, in messages rows and in a prompt's turns; turns the
template renders, reshaped or not (Qwen3's reasoning split out of a reply), still train."""

from __future__ import annotations

import pytest

from tests.support.real_chat_templates import qwen_tokenizer
from trainer.config import DataConfig
from trainer.data.chat import ChatFormatError, row_limit, tokenize_chat
from trainer.data.sft_dataset import tokenize_rows

RESULT = '{"balance": 1234}'


@pytest.fixture(scope="module")
def qwen25():
    return qwen_tokenizer("qwen2_5_instruct")


def chat(role: str) -> list[dict]:
    return [
        {"role": "user", "content": "What is the balance?"},
        {"role": role, "name": "get_balance", "content": RESULT},
        {"role": "assistant", "content": "Your balance is 1234."},
    ]


def refused(tokenizer, rows: list[dict], **data) -> str:
    with pytest.raises(ChatFormatError) as err:
        tokenize_rows(
            rows, DataConfig(max_length=512, **data), tokenizer, lambda i: f"t.jsonl:{i + 1}", False
        )
    return str(err.value)


@pytest.mark.parametrize("role", ["function", "developer", "ipython", "observation"])
def test_a_messages_turn_the_template_skips_is_refused(qwen25, role):
    line = refused(qwen25, [{"messages": chat(role)}])
    assert line.startswith(f"t.jsonl:1: 'messages': turn 2, role {role!r}: ") or line.startswith(
        f"t.jsonl:1: turn 2, role {role!r}: "
    ), line
    assert "does not render it" in line and "drop the turn" in line and RESULT in line
    assert "\n" not in line


def test_a_prompt_turn_the_template_skips_is_refused(qwen25):
    *prompt, answer = chat("function")
    row = {"prompt": prompt, "response": answer["content"]}
    line = refused(qwen25, [row], chat_columns="prompt_response")
    assert "turn 2, role 'function'" in line and "does not render it" in line


def test_turns_the_template_renders_train(qwen25):
    example = tokenize_chat(qwen25, chat("tool"), row_limit(qwen25, "data.max_length", 512))
    assert RESULT in qwen25.decode(example.input_ids)


def test_a_reply_the_template_reshapes_trains():
    """Qwen3 writes a reply's `<think>` part on lines of its own: the content as given is
    not in the text, yet the turn renders."""
    qwen3 = qwen_tokenizer("qwen3")
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "<think>hm</think>hello"},
    ]
    example = tokenize_chat(qwen3, turns, row_limit(qwen3, "data.max_length", 512))
    text = qwen3.decode(example.input_ids)
    assert turns[1]["content"] not in text and "hello" in text
