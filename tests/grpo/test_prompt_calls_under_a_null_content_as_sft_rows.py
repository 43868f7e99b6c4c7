"""A GRPO prompt holding a turn that only calls tools, its content null (OpenAI's form, which
verl passes to the template), is read as an SFT row's is.

Was: every such prompt was refused, as "content may be null only in a turn with tool_calls"
of a turn that had them; with DeepSeek-R1-Distill's template, which writes a turn's calls
only under a null content, no prompt with calls in its history could load: written "" as
that message asked, it was refused as a template that "does not render them".
"""

import pytest

from tests.support.real_chat_templates import qwen_tokenizer
from tests.support.tool_call_chats import (
    USER,
    calling,
    grpo_prompt_ids,
    sft_rows,
)
from trainer.data.chat import ChatFormatError
from trainer.grpo.data import RLDataError

TEXT_CALL = {
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
}
RESULT = {"role": "tool", "content": "20"}
AGAIN = {"role": "user", "content": "And in Bergen?"}
ANSWER = {"role": "assistant", "content": "It is 20 degrees."}


# How each template writes the call whose arguments are the JSON text '{"city": "Oslo"}':
# as the object it holds, as vLLM serves it (Qwen2.5's wrote the text quoted, escaped);
# DeepSeek-R1-Distill's joins arguments to text, and takes them only so
RENDERED_CALL = {
    "qwen2_5_instruct": '{"name": "get_weather", "arguments": {"city": "Oslo"}}',
    "deepseek_r1_distill_jan2025": 'get_weather\n```json\n{"city": "Oslo"}\n```',
}


@pytest.mark.parametrize("name", sorted(RENDERED_CALL))
def test_a_prompts_calls_under_a_null_content_load_rendered(tmp_path, name):
    tokenizer = qwen_tokenizer(name)
    prompt = [USER, calling(None, [TEXT_CALL]), RESULT, AGAIN]
    text = tokenizer.decode(grpo_prompt_ids(tokenizer, tmp_path / "rl.jsonl", prompt))
    assert RENDERED_CALL[name] in text and '\\"city' not in text, text


def test_a_prompt_opening_with_a_calling_turn_loads(tmp_path):
    """Its null content is read as no text, not as a string (the all-empty check)."""
    tokenizer = qwen_tokenizer("qwen2_5_instruct")
    prompt = [calling(None, [TEXT_CALL]), RESULT, AGAIN]
    text = tokenizer.decode(grpo_prompt_ids(tokenizer, tmp_path / "rl.jsonl", prompt))
    assert "get_weather" in text and "And in Bergen?" in text, text


NULL_ADVICE = r"as its content is '' .*write the content as null"


def test_an_empty_content_r1_distill_leaves_out_is_told_to_write_null(tmp_path):
    """The template renders the calls under a null content: the refusal says so, for a
    prompt and an SFT row alike, instead of asking for another template."""
    r1 = qwen_tokenizer("deepseek_r1_distill_jan2025")
    prompt = [USER, calling("", [TEXT_CALL]), RESULT, AGAIN]
    with pytest.raises(RLDataError, match=rf"rl.jsonl:1: .*turn 2.*{NULL_ADVICE}") as err:
        grpo_prompt_ids(r1, tmp_path / "rl.jsonl", prompt)
    assert "use a template" not in str(err.value)
    chat = [USER, calling("", [TEXT_CALL]), RESULT, ANSWER]
    with pytest.raises(ChatFormatError, match=rf"sft.jsonl:1: .*{NULL_ADVICE}"):
        sft_rows(r1, tmp_path / "sft.jsonl", [chat])


@pytest.mark.parametrize("calls", [None, []])
def test_a_null_content_that_calls_nothing_is_still_refused(tmp_path, calls):
    tokenizer = qwen_tokenizer("qwen2_5_instruct")
    turn = {"role": "assistant", "content": None, "tool_calls": calls}
    with pytest.raises(RLDataError, match="content may be null only in a turn that calls tools"):
        grpo_prompt_ids(tokenizer, tmp_path / "rl.jsonl", [USER, turn, AGAIN])
