"""Tool calls and replies that real chat templates mangle are refused, naming file, row and
turn, or read as they are meant; each trained silently before, exit 0.

- `tool_calls` stored as JSON text (as exports store nested lists): Hermes' template looped
  over its characters, some eighty empty calls as the target; verl passes it on the same.
- vLLM's Mistral template writes `[TOOL_CALLS]` and the content, never a call: rendering
  the turns with and without their calls gave other texts, so the calls counted as
  rendered, and the model learned to answer `[TOOL_CALLS]None`.
- An assistant turn kept but its content left out: Hermes' and Llama 3.1's drop the text of a
  turn that calls tools; DeepSeek-R1's first template keeps only what follows `</think>`,
  so a distillation set lost all its reasoning.
- `tool_calls: []` on a plain reply: Gemma 3's trained `[]` before every reply.
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
from trainer.data.chat import ChatFormatError, row_limit, tokenize_chat
from trainer.grpo.data import RLDataError


@pytest.mark.parametrize("calls", [json.dumps([CALL]), ["get_weather"], CALL])
def test_tool_calls_that_are_not_a_list_of_objects_are_refused(tmp_path, calls):
    hermes = qwen_tokenizer("vllm_hermes")
    path = tmp_path / "text_calls.jsonl"
    chat = [USER, {"role": "assistant", "content": "", "tool_calls": calls}, RESULT, ANSWER]
    with pytest.raises(ChatFormatError) as err:
        sft_rows(hermes, path, [[USER, ANSWER], chat])
    line = str(err.value)
    assert line.startswith(f"{path}:2: 'messages': turn 2 ('assistant'): tool_calls must be")
    assert "\n" not in line
    with pytest.raises(RLDataError, match=r"rl.jsonl:1: .*turn 2 \('assistant'\): tool_calls"):
        grpo_prompt_ids(hermes, tmp_path / "rl.jsonl", [*chat[:3], USER])


@pytest.mark.parametrize("content", [None, "Let me check."])
def test_a_template_that_never_writes_the_calls_is_refused(tmp_path, content):
    mistral = qwen_tokenizer("vllm_mistral")
    path = tmp_path / "mistral.jsonl"
    chat = [USER, calling(content), {"role": "tool", "content": "20"}, ANSWER]
    with pytest.raises(ChatFormatError, match=r"jsonl:1: .*does not render them \(turn 2"):
        sft_rows(mistral, path, [chat])
    with pytest.raises(RLDataError, match=r"rl.jsonl:1: .*does not render them \(turn 2"):
        # a GRPO prompt's content is text
        grpo_prompt_ids(
            mistral, tmp_path / "rl.jsonl", [USER, calling(content or ""), chat[2], USER]
        )


@pytest.mark.parametrize(
    "name", ["vllm_hermes", "vllm_llama3_1_json", "vllm_gemma3_pythonic", "qwen2_5_instruct"]
)
def test_templates_that_write_the_calls_train_them(tmp_path, name):
    tokenizer = qwen_tokenizer(name)
    chat = [USER, calling(""), RESULT, ANSWER]
    (example,) = sft_rows(tokenizer, tmp_path / "ok.jsonl", [chat])
    trained = trained_text(tokenizer, example)
    assert "get_weather" in trained and "Oslo" in trained


@pytest.mark.parametrize("name", ["vllm_hermes", "vllm_llama3_1_json"])
def test_the_text_of_a_calling_turn_the_template_drops_is_refused(tmp_path, name):
    tokenizer = qwen_tokenizer(name)
    chat = [USER, calling("Let me check the forecast first."), RESULT, ANSWER]
    with pytest.raises(ChatFormatError) as err:
        sft_rows(tokenizer, tmp_path / "drop.jsonl", [chat])
    line = str(err.value)
    assert "drop.jsonl:1: turn 2, role 'assistant'" in line and "leaves out its content" in line
    assert "Let me check the forecast first." in line and "\n" not in line
    # nothing to lose: a blank content trains
    (example,) = sft_rows(
        tokenizer, tmp_path / "blank.jsonl", [[USER, calling(""), RESULT, ANSWER]]
    )
    assert "get_weather" in trained_text(tokenizer, example)


def test_reasoning_the_template_cuts_off_is_refused(tmp_path):
    r1 = qwen_tokenizer("deepseek_r1_jan2025")
    reply = {"role": "assistant", "content": "<think>\n2 plus 3 is 5.\n</think>\n\nIt is 5."}
    with pytest.raises(ChatFormatError) as err:
        sft_rows(r1, tmp_path / "r1.jsonl", [[{"role": "user", "content": "2+3?"}, reply]])
    line = str(err.value)
    assert "r1.jsonl:1: turn 2, role 'assistant'" in line and "leaves out its content" in line
    # its advice is true of this template, which renders no reasoning_content either
    assert "reasoning_content" not in line and "use a template that renders it" in line
    assert "'<think>\\n2 plus 3 is 5.\\n</think>'" in line  # all it drops, not '<think>'
    plain = {"role": "assistant", "content": "It is 5."}
    (example,) = sft_rows(r1, tmp_path / "ok.jsonl", [[{"role": "user", "content": "2+3?"}, plain]])
    assert "It is 5." in trained_text(r1, example)


@pytest.mark.parametrize("change", ["| trim", "| capitalize", "| upper"])
def test_a_reply_the_template_changes_but_keeps_trains(change):
    tokenizer = qwen_tokenizer("qwen3")
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['role'] == 'assistant' %}{{ m['content'] " + change + " }}"
        "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    turns = [USER, {"role": "assistant", "content": " it is 20.\nWarm.  "}]
    example = tokenize_chat(tokenizer, turns, row_limit(tokenizer, "data.max_length", 512))
    assert example.num_targets > 0


@pytest.mark.parametrize("name", ["vllm_gemma3_pythonic", "vllm_llama3_1_json", "vllm_hermes"])
def test_empty_tool_calls_are_no_calls(tmp_path, name):
    tokenizer = qwen_tokenizer(name)
    reply = {"role": "assistant", "content": "The answer is 5.", "tool_calls": []}
    (example,) = sft_rows(tokenizer, tmp_path / "empty.jsonl", [[USER, reply]])
    trained = trained_text(tokenizer, example)
    assert trained.startswith("The answer is 5.")
    (plain,) = sft_rows(
        tokenizer, tmp_path / "plain.jsonl", [[USER, {**reply, "tool_calls": None}]]
    )
    assert example.input_ids == plain.input_ids
    prompt = [USER, reply, {"role": "user", "content": "And 2+4?"}]
    without = [USER, {**reply, "tool_calls": None}, prompt[2]]
    assert grpo_prompt_ids(tokenizer, tmp_path / "rl.jsonl", prompt) == grpo_prompt_ids(
        tokenizer, tmp_path / "rl2.jsonl", without
    )
