"""A tool call's arguments given as JSON text of an object (OpenAI's form) reach the chat
template as that object, as vLLM's chat completions hand them to it (`_postprocess_messages`
parses them), so SFT trains, and GRPO prompts, what the served model sees.

Was: the text went to the template as it is, and Hermes', Llama 3.1's and Qwen2.5's
templates wrote it with `tojson`: the model learned `"arguments": "{\\"city\\": ...}"`, a
quoted string its served self never saw and vLLM's tool parsers returned as a string.
"""

import pytest

from tests.support.real_chat_templates import qwen_tokenizer
from tests.trainer.data.test_tool_calls_and_replies_the_template_leaves_out import (
    ANSWER,
    RESULT,
    USER,
    calling,
    grpo_prompt_ids,
    sft_rows,
    trained_text,
)
from trainer.data.chat_call_arguments import parsed_object

OBJECT = {"city": "Oslo", "days": [1, 2], "units": {"temp": "C"}}
TEXT = '{"city": "Oslo", "days": [1, 2], "units": {"temp": "C"}}'
AS_OBJECT = {"type": "function", "function": {"name": "get_weather", "arguments": OBJECT}}
AS_TEXT = {"type": "function", "function": {"name": "get_weather", "arguments": TEXT}}
# how each template writes those arguments as an object
WRITTEN = {
    "vllm_hermes": '"arguments": {"city": "Oslo", "days": [1, 2], "units": {"temp": "C"}}',
    "vllm_llama3_1_json": '"parameters": {"city": "Oslo", "days": [1, 2], "units": {"temp": "C"}}',
    "qwen2_5_instruct": '"arguments": {"city": "Oslo", "days": [1, 2], "units": {"temp": "C"}}',
}


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_sft_trains_json_text_arguments_as_the_object_they_hold(tmp_path, name):
    tokenizer = qwen_tokenizer(name)
    text_row, object_row = (
        sft_rows(
            tokenizer, tmp_path / f"{form}.jsonl", [[USER, calling(None, [call]), RESULT, ANSWER]]
        )[0]
        for form, call in (("text", AS_TEXT), ("object", AS_OBJECT))
    )
    assert WRITTEN[name] in trained_text(tokenizer, text_row)
    assert text_row.input_ids == object_row.input_ids


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_grpo_prompts_hold_json_text_arguments_as_the_object(tmp_path, name):
    tokenizer = qwen_tokenizer(name)
    prompt = [USER, calling(None, [AS_TEXT]), RESULT, {"role": "user", "content": "And now?"}]
    text = tokenizer.decode(grpo_prompt_ids(tokenizer, tmp_path / "rl.jsonl", prompt))
    assert WRITTEN[name] in text and '\\"city' not in text


@pytest.mark.parametrize(
    "text", ['["Oslo"]', '"Oslo"', "city=Oslo", '{"city": "Oslo"', "[" * 100_000, "{}x"]
)
def test_only_text_that_is_a_json_object_whole_is_parsed(text):
    assert parsed_object(text) is None


def test_text_of_an_object_is_parsed_as_json_reads_it():
    assert parsed_object(TEXT) == OBJECT
    assert parsed_object(' {"a": 1.5, "b": null} ') == {"a": 1.5, "b": None}
