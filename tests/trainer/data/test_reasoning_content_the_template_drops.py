"""A trained assistant turn's `reasoning_content` that the chat template does not render is
refused, as its content is where the template leaves it out.

Was: only Qwen3's template renders that key; every other one (Hermes', Llama 3.1's, Gemma
3's, Mistral's, DeepSeek-R1's and R1-Distill's, Qwen2.5's) trained the reply alone, exit 0:
a distillation set stored OpenAI-style lost all its reasoning without a word. And the
refusal of reasoning inside the content advised moving it into `reasoning_content` with
templates that drop that key too.

Reasoning under `reasoning` (the field vLLM 0.32's replies write and its API reads) reaches
the template under both keys, as vLLM hands it on. Was: passed on as it was, so Qwen3's
template (which reads `reasoning_content`) trained the reply alone and prompted without the
reasoning vLLM renders, and the refusal above did not look at it.
"""

import pytest

from tests.support.real_chat_templates import qwen_tokenizer
from tests.support.tool_call_chats import (
    USER,
    grpo_prompt_ids,
    sft_rows,
    trained_text,
)
from trainer.data.chat import ChatFormatError

REASONING = "Oslo is cold in winter, so about 20 by the tool."
REPLY = {"role": "assistant", "content": "It is 20.", "reasoning_content": REASONING}
# where the template keeps `<think>...</think>` written into the content, the refusal says so
KEEPS_THINK_IN_CONTENT = {
    "vllm_hermes": True,
    "vllm_llama3_1_json": True,
    "vllm_gemma3_pythonic": True,
    "vllm_mistral": True,
    "qwen2_5_instruct": True,
    "deepseek_r1_jan2025": False,
    "deepseek_r1_distill_jan2025": False,
}


VLLM_REPLY = {"role": "assistant", "content": "It is 20.", "reasoning": REASONING}


@pytest.mark.parametrize("reply", [REPLY, VLLM_REPLY], ids=["reasoning_content", "reasoning"])
@pytest.mark.parametrize("name", sorted(KEEPS_THINK_IN_CONTENT))
def test_reasoning_content_a_template_drops_is_refused_naming_the_turn(tmp_path, name, reply):
    tokenizer = qwen_tokenizer(name)
    with pytest.raises(ChatFormatError) as err:
        sft_rows(tokenizer, tmp_path / "sft.jsonl", [[USER, reply]])
    line = str(err.value)
    assert "sft.jsonl:1: turn 2, role 'assistant'" in line and "\n" not in line
    assert f"leaves out its reasoning_content ({REASONING!r})" in line
    assert ("write it into the content" in line) is KEEPS_THINK_IN_CONTENT[name]
    assert "drop the key" in line
    # the reply without the key trains
    (example,) = sft_rows(
        tokenizer, tmp_path / "ok.jsonl", [[USER, {**REPLY, "reasoning_content": None}]]
    )
    assert "It is 20." in trained_text(tokenizer, example)


@pytest.mark.parametrize("reply", [REPLY, VLLM_REPLY], ids=["reasoning_content", "reasoning"])
def test_qwen3_trains_the_reasoning_it_renders(tmp_path, reply):
    qwen3 = qwen_tokenizer("qwen3")
    (example,) = sft_rows(qwen3, tmp_path / "sft.jsonl", [[USER, reply]])
    assert f"<think>\n{REASONING}\n</think>\n\nIt is 20." in trained_text(qwen3, example)


def test_qwen3_prompts_hold_the_reasoning_vllm_renders(tmp_path):
    """vLLM renders a calling turn's `reasoning` before its calls (text read off its
    `_parse_chat_message_content`, which passes it on as both keys, by hand)."""
    qwen3 = qwen_tokenizer("qwen3")
    call = {
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    turn = {"role": "assistant", "content": "", "reasoning": "Need Oslo.", "tool_calls": [call]}
    prompt = [USER, turn, {"role": "tool", "content": "20"}]
    text = qwen3.decode(grpo_prompt_ids(qwen3, tmp_path / "rl.jsonl", prompt))
    assert "<|im_start|>assistant\n<think>\nNeed Oslo.\n</think>\n\n<tool_call>\n" in text


def test_qwen3_refuses_an_earlier_reply_whose_reasoning_it_drops(tmp_path):
    """Qwen3's template renders reasoning only in the replies after the last user turn."""
    qwen3 = qwen_tokenizer("qwen3")
    chat = [USER, REPLY, {"role": "user", "content": "And now?"}, REPLY]
    with pytest.raises(ChatFormatError, match=r"turn 2, role 'assistant'.*reasoning_content") as e:
        sft_rows(qwen3, tmp_path / "sft.jsonl", [chat])
    assert "only in the replies after the last user turn" in str(e.value)
    assert "one row per reply" in str(e.value)


@pytest.mark.parametrize("name", ["vllm_hermes", "deepseek_r1_jan2025"])
def test_a_prompts_earlier_reasoning_loads_as_served(tmp_path, name):
    """A prompt trains nothing: its replies render as the model is served them."""
    tokenizer = qwen_tokenizer(name)
    prompt = [USER, REPLY, {"role": "user", "content": "And now?"}]
    text = tokenizer.decode(grpo_prompt_ids(tokenizer, tmp_path / "rl.jsonl", prompt))
    assert "It is 20." in text and REASONING not in text


def test_content_advice_names_reasoning_content_only_where_the_template_renders_it(tmp_path):
    """Hermes' template drops the text of a calling turn and renders no `reasoning_content`:
    the advice names a turn of its own for the text, not that key."""
    hermes = qwen_tokenizer("vllm_hermes")
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    calling = {"role": "assistant", "content": "Let me check.", "tool_calls": [call]}
    result = {"role": "tool", "name": "get_weather", "content": "20"}
    chat = [USER, calling, result, {"role": "assistant", "content": "It is 20."}]
    with pytest.raises(ChatFormatError) as err:
        sft_rows(hermes, tmp_path / "sft.jsonl", [chat])
    line = str(err.value)
    assert "into a turn of its own" in line and "reasoning_content" not in line


@pytest.mark.parametrize("blank", ["", "  \n"])
def test_a_blank_reasoning_key_hides_no_reasoning_content(tmp_path, blank):
    """Was: `reasoning: ""` beside a reasoning_content was handed on as the reasoning, so
    Qwen3 trained an empty `<think>` block and the check saw nothing left out."""
    qwen3 = qwen_tokenizer("qwen3")
    (example,) = sft_rows(qwen3, tmp_path / "sft.jsonl", [[USER, {**REPLY, "reasoning": blank}]])
    assert REASONING in trained_text(qwen3, example)
