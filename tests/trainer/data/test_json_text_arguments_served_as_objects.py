"""A tool call's arguments given as JSON text of an object (OpenAI's form) reach the chat
template as that object, as vLLM's chat completions hand them to it (`_postprocess_messages`
parses them), so SFT trains, and GRPO prompts, what the served model sees.

Was: the text went to the template as it is, and Hermes', Llama 3.1's and Qwen2.5's
templates wrote it with `tojson`: the model learned `"arguments": "{\\"city\\": ...}"`, a
quoted string its served self never saw and vLLM's tool parsers returned as a string.

Arguments holding no object (null, "", text that is not JSON, JSON of another type) reach
it as `{}`, as vLLM 0.32 serves them. Was: the text trained (`"arguments": ""`), and null
raised the template's TypeError (Qwen2.5's, Qwen3's, Llama 3.1's) or trained a call without
arguments (Hermes'). The expected `{}` forms are read off `_postprocess_messages` by hand
(importing vLLM takes some 15 s).
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
from trainer.data.chat_call_arguments import served_arguments
from trainer.grpo.data import RLDataError

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


# how each template writes arguments served as `{}`
WRITTEN_EMPTY = {
    "vllm_hermes": '"arguments": {}',
    "vllm_llama3_1_json": '"parameters": {}',
    "qwen2_5_instruct": '"arguments": {}',
    "qwen3": '"arguments": {}',
}
NO_OBJECT = [None, "", "[1, 2]", "not json", '"Oslo"', "42", '{"city": "Oslo"']


def _call(arguments):
    return {"type": "function", "function": {"name": "get_weather", "arguments": arguments}}


# (Qwen3's renders such a chat otherwise once later turns follow: refused as verl does)
@pytest.mark.parametrize("name", sorted(set(WRITTEN_EMPTY) - {"qwen3"}))
@pytest.mark.parametrize("arguments", NO_OBJECT)
def test_sft_trains_arguments_holding_no_object_as_vllm_serves_them(tmp_path, name, arguments):
    tokenizer = qwen_tokenizer(name)
    chat = [USER, calling(None, [_call(arguments)]), RESULT, ANSWER]
    (example,) = sft_rows(tokenizer, tmp_path / "sft.jsonl", [chat])
    (empty,) = sft_rows(
        tokenizer, tmp_path / "empty.jsonl", [[*chat[:1], calling(None, [_call({})]), *chat[2:]]]
    )
    assert WRITTEN_EMPTY[name] in trained_text(tokenizer, example)
    assert example.input_ids == empty.input_ids


@pytest.mark.parametrize("name", sorted(WRITTEN_EMPTY))
@pytest.mark.parametrize("arguments", [None, "", "not json", "[1, 2]"])
def test_grpo_prompts_hold_arguments_holding_no_object_as_vllm_serves_them(
    tmp_path, name, arguments
):
    tokenizer = qwen_tokenizer(name)
    prompt = [USER, calling(None, [_call(arguments)]), RESULT, {"role": "user", "content": "And?"}]
    text = tokenizer.decode(grpo_prompt_ids(tokenizer, tmp_path / "rl.jsonl", prompt))
    assert WRITTEN_EMPTY[name] in text


def test_a_call_without_arguments_is_served_with_empty_ones(tmp_path):
    hermes = qwen_tokenizer("vllm_hermes")
    call = {"type": "function", "function": {"name": "get_weather"}}
    (example,) = sft_rows(
        hermes, tmp_path / "sft.jsonl", [[USER, calling(None, [call]), RESULT, ANSWER]]
    )
    assert '{ "arguments": {}, "name": "get_weather"}' in trained_text(hermes, example)


@pytest.mark.parametrize(
    "arguments",
    [
        '["Oslo"]',
        '"Oslo"',
        "city=Oslo",
        '{"city": "Oslo"',
        "{}x",
        "",
        None,
        0,
        [1],
        "null",
        "true",
    ],
)
def test_arguments_holding_no_object_are_served_empty(arguments):
    assert served_arguments(arguments) == {}


def test_text_vllm_fails_on_is_not_served():
    """vLLM catches only JSONDecodeError: text nested deeper than the parser goes fails."""
    assert served_arguments('{"a": ' * 100_000 + "1" + "}" * 100_000) is None
    assert served_arguments("[" * 100_000) is None


DEEP = '{"a": ' * 100_000 + "1" + "}" * 100_000  # past the parser's recursion limit


@pytest.mark.parametrize("name", ["vllm_hermes", "qwen2_5_instruct"])
def test_arguments_vllm_fails_on_are_refused_naming_row_turn_and_call(tmp_path, name):
    """Was: the text trained as it is (Hermes: `"arguments": "{\\"a\\": ...`), a call no
    served model is shown: vLLM fails the request on it."""
    tokenizer = qwen_tokenizer(name)
    deep = {"type": "function", "function": {"name": "get_weather", "arguments": DEEP}}
    turns = [USER, calling(None, [AS_TEXT, deep]), RESULT]
    with pytest.raises(ChatFormatError) as err:
        sft_rows(tokenizer, tmp_path / "sft.jsonl", [[*turns, ANSWER]])
    line = str(err.value)
    assert "sft.jsonl:1: 'messages': turn 2 ('assistant'): tool call 2 ('get_weather')" in line
    assert "nested deeper than Python's JSON parser reads" in line and "\n" not in line
    assert len(line) < 600
    with pytest.raises(RLDataError, match=r"rl.jsonl:1: .*turn 2 \('assistant'\): tool call 2 "):
        grpo_prompt_ids(tokenizer, tmp_path / "rl.jsonl", turns)


def test_text_of_an_object_is_parsed_as_json_reads_it():
    assert served_arguments(TEXT) == OBJECT
    assert served_arguments(' {"a": 1.5, "b": null} ') == {"a": 1.5, "b": None}
    assert served_arguments(OBJECT) is OBJECT
