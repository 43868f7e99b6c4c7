"""A template that raises on a calling turn in one form and renders it in another is
refused naming the turn and the form it takes.

Was: DeepSeek-R1-Distill's template, given a call's arguments as an object (the form the
refusals advise for other templates), failed with the raw "TypeError: can only concatenate
str (not "dict") to str"; a template taking no null content, given OpenAI's null content
of a turn that only calls tools, with "TemplateError: Invalid content type": neither named
a turn or a remedy. (Gemma 3's is handed a null content as vLLM hands it, no parts:
tests/trainer/data/test_content_handed_as_vllm_hands_it.py.)
"""

import json

import pytest

from tests.support.real_chat_templates import qwen_tokenizer
from tests.support.tool_call_chats import (
    ANSWER,
    CALL,
    RESULT,
    USER,
    calling,
    grpo_prompt_ids,
    sft_rows,
    trained_text,
)
from trainer.data.chat import ChatFormatError
from trainer.grpo.data import RLDataError

TEXT_CALL = {**CALL, "function": {**CALL["function"], "arguments": json.dumps({"city": "Oslo"})}}
AGAIN = {"role": "user", "content": "And now?"}


def test_r1_distill_says_to_store_arguments_as_json_text(tmp_path):
    r1d = qwen_tokenizer("deepseek_r1_distill_jan2025")
    with pytest.raises(ChatFormatError) as err:
        sft_rows(r1d, tmp_path / "sft.jsonl", [[USER, calling(None), RESULT, ANSWER]])
    line = str(err.value)
    assert "sft.jsonl:1: turn 2, role 'assistant': " in line and "\n" not in line
    assert (
        "arguments only as JSON text" in line and "store each call's arguments as JSON text" in line
    )
    with pytest.raises(RLDataError, match=r"rl.jsonl:1: turn 2, role 'assistant': .*as JSON text"):
        grpo_prompt_ids(r1d, tmp_path / "rl.jsonl", [USER, calling(None), RESULT, AGAIN])
    # following it trains the call
    (example,) = sft_rows(
        r1d, tmp_path / "ok.jsonl", [[USER, calling(None, [TEXT_CALL]), RESULT, ANSWER]]
    )
    assert '{"city": "Oslo"}' in trained_text(r1d, example)


def test_r1_distill_empty_content_and_object_arguments_get_both_remedies(tmp_path):
    r1d = qwen_tokenizer("deepseek_r1_distill_jan2025")
    with pytest.raises(ChatFormatError) as err:
        sft_rows(r1d, tmp_path / "sft.jsonl", [[USER, calling(""), RESULT, ANSWER]])
    line = str(err.value)
    assert "write the content as null and each call's arguments as JSON text" in line
    assert "use a template" not in line


# a template (of vLLM's "string" content format) that takes no null content, and renders
# each call after the content
NO_NULL = (
    "{% for message in messages %}{% if message['content'] is none %}"
    "{{ raise_exception('Invalid content type') }}{% endif %}"
    "<{{ message['role'] }}>{{ message['content'] }}"
    "{% for call in message.tool_calls or [] %}"
    "[{{ call.function.name }} {{ call.function.arguments | tojson }}]{% endfor %}"
    "</{{ message['role'] }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def test_a_null_content_a_template_does_not_take_says_to_write_an_empty_one(tmp_path):
    """vLLM hands such a template "" for a null content: the refusal says to store that."""
    tokenizer = qwen_tokenizer("qwen2_5_instruct")
    tokenizer.chat_template = NO_NULL
    with pytest.raises(ChatFormatError) as err:
        sft_rows(tokenizer, tmp_path / "sft.jsonl", [[USER, calling(None), RESULT, ANSWER]])
    line = str(err.value)
    assert "sft.jsonl:1: turn 2, role 'assistant': " in line and "Invalid content type" in line
    assert "takes no null content" in line and "write the content as ''" in line
    (example,) = sft_rows(tokenizer, tmp_path / "ok.jsonl", [[USER, calling(""), RESULT, ANSWER]])
    assert '[get_weather {"city": "Oslo"}]' in trained_text(tokenizer, example)


def test_a_template_raising_otherwise_keeps_its_own_message(tmp_path):
    """Gemma's alternation rule is no form of the calling turn: no turn or remedy is made up."""
    gemma = qwen_tokenizer("vllm_gemma3_pythonic")
    with pytest.raises(RLDataError) as err:
        grpo_prompt_ids(gemma, tmp_path / "rl.jsonl", [USER, calling(""), RESULT, AGAIN])
    line = str(err.value)
    assert "cannot render it (TemplateError: Conversation roles must alternate" in line
    assert "turn 2" not in line
