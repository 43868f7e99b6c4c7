"""Tool calls and replies are judged in a chat of the row's own shape, and only where they
train; each was misjudged once the probe gave every turn's content a marker.

- DeepSeek-R1-Distill's template writes a turn's calls only where its content is null: the
  probe's marker took the other branch, and every tool-calling row was refused as "does not
  render them", though its text shows the calls.
- A template writing calls only where the content is not empty: a row with content "" and
  calls trained an empty reply, the probe's marker having shown the calls.
- GRPO prompts whose earlier replies hold `<think>` (Qwen3's, DeepSeek-R1's strip it, as the
  models are served) were refused as "leaves out its content"; no prompt turn trains.
- `tool_calls` "", blank text or `{}` on a plain reply (exports write "" for "none") refused
  every row.
- A reply a template writes through `|tojson` or `|e` was refused as left out.
- JSON-text arguments the template writes a character at a time: refused, told to store
  them as an object (with which the row trains), not to change templates.
"""

import pytest

from tests.support.real_chat_templates import qwen_tokenizer
from tests.support.tool_call_chats import (
    ANSWER,
    USER,
    calling,
    grpo_prompt_ids,
    sft_rows,
    trained_text,
)
from trainer.data.chat import ChatFormatError

TEXT_CALL = {
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
}
RESULT = {"role": "tool", "content": "20"}


def test_r1_distill_calls_under_a_null_content_train(tmp_path):
    r1 = qwen_tokenizer("deepseek_r1_distill_jan2025")
    (example,) = sft_rows(
        r1, tmp_path / "r1.jsonl", [[USER, calling(None, [TEXT_CALL]), RESULT, ANSWER]]
    )
    trained = trained_text(r1, example)
    assert "get_weather" in trained and '{"city": "Oslo"}' in trained
    # an empty content takes the branch that writes no call: refused, as the text lacks them
    with pytest.raises(ChatFormatError, match=r"r1e.jsonl:1: .*does not render them \(turn 2"):
        sft_rows(r1, tmp_path / "r1e.jsonl", [[USER, calling("", [TEXT_CALL]), RESULT, ANSWER]])


def test_calls_written_only_for_a_content_are_refused_under_an_empty_one(tmp_path):
    tokenizer = qwen_tokenizer("qwen3")
    tokenizer.chat_template = (
        "{%- for m in messages -%}<|{{ m.role }}|>{%- if m.content -%}{{ m.content }}"
        "{%- for c in m.tool_calls or [] -%}<call>{{ c.function.name }}"
        "({{ c.function.arguments | tojson }})</call>{%- endfor -%}{%- endif -%}<|end|>\n"
        "{% endfor -%}{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
    )
    with pytest.raises(ChatFormatError, match=r"empty.jsonl:1: .*does not render them \(turn 2"):
        sft_rows(tokenizer, tmp_path / "empty.jsonl", [[USER, calling(""), RESULT, ANSWER]])
    (example,) = sft_rows(
        tokenizer, tmp_path / "text.jsonl", [[USER, calling("Checking."), RESULT, ANSWER]]
    )
    assert "get_weather" in trained_text(tokenizer, example)


@pytest.mark.parametrize("name", ["qwen3", "deepseek_r1_jan2025"])
def test_grpo_prompts_with_reasoning_in_earlier_replies_load(tmp_path, name):
    tokenizer = qwen_tokenizer(name)
    earlier = {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n7"}
    prompt = [{"role": "user", "content": "3+4?"}, earlier, {"role": "user", "content": "*1?"}]
    ids = grpo_prompt_ids(tokenizer, tmp_path / "rl.jsonl", prompt)
    text = tokenizer.decode(ids)
    assert "7" in text and "add them" not in text  # as the model is served
    # a reply that trains stays refused where the template cuts its reasoning off
    if name == "deepseek_r1_jan2025":
        with pytest.raises(ChatFormatError, match="leaves out its content"):
            sft_rows(tokenizer, tmp_path / "sft.jsonl", [prompt[:2]])


@pytest.mark.parametrize("calls", ["", "   ", {}, "[]", "null"])
@pytest.mark.parametrize("name", ["qwen2_5_instruct", "vllm_hermes"])
def test_tool_calls_holding_nothing_are_no_calls(tmp_path, name, calls):
    tokenizer = qwen_tokenizer(name)
    reply = {"role": "assistant", "content": "Hello there.", "tool_calls": calls}
    (example,) = sft_rows(tokenizer, tmp_path / "none.jsonl", [[USER, reply]])
    (plain,) = sft_rows(
        tokenizer, tmp_path / "plain.jsonl", [[USER, {**reply, "tool_calls": None}]]
    )
    assert example.input_ids == plain.input_ids


def test_tool_calls_of_other_text_are_refused_as_text(tmp_path):
    reply = {"role": "assistant", "content": "Hello there.", "tool_calls": "none"}
    with pytest.raises(ChatFormatError) as err:
        sft_rows(qwen_tokenizer("vllm_hermes"), tmp_path / "text.jsonl", [[USER, reply]])
    assert "tool_calls must be a list" in str(err.value) and "JSON text" not in str(err.value)


@pytest.mark.parametrize("write", ["| tojson", "| e"])
@pytest.mark.parametrize(
    "reply", ["line one\nline two", 'say "hi"', "tab\there", "back\\slash", "a < b & c"]
)
def test_a_reply_the_template_escapes_trains(tmp_path, write, reply):
    tokenizer = qwen_tokenizer("qwen3")
    tokenizer.chat_template = (
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content " + write + " }}<|end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    (example,) = sft_rows(
        tokenizer, tmp_path / "esc.jsonl", [[USER, {"role": "assistant", "content": reply}]]
    )
    assert example.num_targets > 0


def test_text_arguments_are_written_as_vllm_serves_them(tmp_path):
    """JSON text of an object is served parsed, so Gemma's template writes it as the object
    it holds; other text (which it wrote a character at a time) vLLM serves as `{}`."""
    gemma = qwen_tokenizer("vllm_gemma3_pythonic")
    (example,) = sft_rows(
        gemma, tmp_path / "text.jsonl", [[USER, calling("", [TEXT_CALL]), RESULT, ANSWER]]
    )
    assert '[get_weather(city="Oslo")]' in trained_text(gemma, example)
    not_an_object = {"function": {"name": "get_weather", "arguments": '["Oslo"]'}}
    (example,) = sft_rows(
        gemma, tmp_path / "g.jsonl", [[USER, calling("", [not_an_object]), RESULT, ANSWER]]
    )
    assert "[get_weather()]" in trained_text(gemma, example)
    (example,) = sft_rows(gemma, tmp_path / "ok.jsonl", [[USER, calling(""), RESULT, ANSWER]])
    assert "get_weather" in trained_text(gemma, example)
    # a template that writes no call whatever the arguments still says to change templates
    with pytest.raises(ChatFormatError, match="use a template that renders tool_calls"):
        sft_rows(
            qwen_tokenizer("vllm_mistral"),
            tmp_path / "m.jsonl",
            [[USER, calling("", [TEXT_CALL]), RESULT, ANSWER]],
        )
