"""A tool call with no function name (`tool_calls: [{}]`, a function without a name, or one
whose name is null or blank) is refused, naming file, row and turn: there is no call to
learn. Was: with DeepSeek-R1's template the call disappeared from the trained text, with
Hermes' the row trained `{ "name": ""}` as the call, exit 0 (the probe put no marker where
a call had no name, so a call left out went unseen).
"""

import pytest

from tests.support.real_chat_templates import qwen_tokenizer
from tests.support.tool_call_chats import (
    ANSWER,
    RESULT,
    USER,
    calling,
    grpo_prompt_ids,
    sft_rows,
    trained_text,
)
from trainer.data.chat import ChatFormatError
from trainer.grpo.data import RLDataError

NAMELESS = {
    "empty": {},
    "no-name": {"type": "function", "function": {"arguments": {"city": "Oslo"}}},
    "null-name": {"type": "function", "function": {"name": None, "arguments": "{}"}},
    "blank-name": {"type": "function", "function": {"name": " ", "arguments": "{}"}},
    "number-name": {"type": "function", "function": {"name": 7, "arguments": "{}"}},
    "flat-no-name": {"arguments": {"city": "Oslo"}},
}
NAMED = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}


@pytest.mark.parametrize("name", ["deepseek_r1_jan2025", "vllm_hermes"])
@pytest.mark.parametrize("call", list(NAMELESS.values()), ids=list(NAMELESS))
def test_an_sft_call_without_a_name_is_refused_naming_file_row_and_turn(tmp_path, name, call):
    path = tmp_path / "train.jsonl"
    chat = [USER, calling("", [NAMED, call]), RESULT, ANSWER]
    with pytest.raises(ChatFormatError) as err:
        sft_rows(qwen_tokenizer(name), path, [[USER, ANSWER], chat])
    line = str(err.value)
    assert line.startswith(
        f"{path}:2: 'messages': turn 2 ('assistant'): tool call 2 has no function name"
    ), line
    assert "\n" not in line


def test_a_grpo_prompt_call_without_a_name_is_refused(tmp_path):
    prompt = [USER, calling("", [{}]), RESULT, USER]
    with pytest.raises(RLDataError, match=r"rl.jsonl:1: .*turn 2 .*tool call 1 has no function"):
        grpo_prompt_ids(qwen_tokenizer("vllm_hermes"), tmp_path / "rl.jsonl", prompt)


def test_named_calls_still_train(tmp_path):
    tokenizer = qwen_tokenizer("vllm_hermes")
    (example,) = sft_rows(
        tokenizer, tmp_path / "ok.jsonl", [[USER, calling("", [NAMED]), RESULT, ANSWER]]
    )
    assert '"name": "get_weather"' in trained_text(tokenizer, example)
