"""Each turn's content reaches the chat template in the form vLLM 0.32 hands it: a list of
parts for a template that loops over a turn's content (vLLM's "openai" content format,
Gemma 3's), a null content as no parts; text for the others.

Was: the text went to every template, and Gemma 3's, given OpenAI's null content of a turn
that only calls tools, raised "Invalid content type": the row was refused, telling its
writer to store '' though vLLM serves it. The expected forms are read off vLLM's
`_detect_content_format` and `_parse_chat_message_content` (each case here gives what
they give; importing vLLM takes some 15 s, too long for a test).
"""

import pytest

from tests.support.real_chat_templates import qwen_tokenizer, template_text
from tests.support.tool_call_chats import (
    ANSWER,
    RESULT,
    USER,
    calling,
    grpo_prompt_ids,
    sft_rows,
    trained_text,
)
from trainer.data.chat import chat_ids, row_limit
from trainer.data.chat_content_parts import reads_content_parts

AGAIN = {"role": "user", "content": "And now?"}
# vLLM's rendering of [USER, calling(None), RESULT, ANSWER, AGAIN] with Gemma 3's template
GEMMA_PROMPT = (
    "<start_of_turn>user\nWeather in Oslo?<end_of_turn>\n"
    '<start_of_turn>model\n[get_weather(city="Oslo")]<end_of_turn>\n'
    "<start_of_turn>user\n<tool_response>\n20</tool_response><end_of_turn>\n"
    "<start_of_turn>model\nIt is 20 degrees.<end_of_turn>\n"
    "<start_of_turn>user\nAnd now?<end_of_turn>\n<start_of_turn>model\n"
)


def test_gemma_trains_a_null_content_as_vllm_serves_it(tmp_path):
    gemma = qwen_tokenizer("vllm_gemma3_pythonic")
    (example,) = sft_rows(gemma, tmp_path / "sft.jsonl", [[USER, calling(None), RESULT, ANSWER]])
    trained = trained_text(gemma, example)
    assert trained == '[get_weather(city="Oslo")]<end_of_turn>\nIt is 20 degrees.<end_of_turn>\n'
    ids = grpo_prompt_ids(
        gemma, tmp_path / "rl.jsonl", [USER, calling(None), RESULT, ANSWER, AGAIN]
    )
    assert gemma.decode(ids) == GEMMA_PROMPT


# shows which form each turn's content reached it in
SHOWS_FORM = (
    "{% for message in messages %}{% if message.content is string %}text {{ message.content }}"
    "{% else %}parts{% for part in message.content %} {{ part.text }}{% endfor %}{% endif %}|"
    "{% endfor %}"
)


def test_a_template_looping_over_content_is_given_parts():
    """vLLM joins a tool turn's text parts back to text; a null content is no parts."""
    tokenizer = qwen_tokenizer("qwen2_5_instruct")
    tokenizer.chat_template = SHOWS_FORM
    turns = [
        {"role": "system", "content": "Be brief."},
        USER,
        calling(None),
        RESULT,
        ANSWER,
    ]
    text = chat_ids(tokenizer, turns, row_limit(tokenizer, "data.max_length", 512))["text"]
    assert text == ("parts Be brief.|parts Weather in Oslo?|parts|text 20|parts It is 20 degrees.|")


LOOP = "{% for m in messages %}{% for c in m.content %}{{ c.text }}{% endfor %}{% endfor %}"
MACRO = "{% macro r(x) %}{% for c in x %}{{ c }}{% endfor %}{% endmacro %}"
FORMS = {  # template, whether vLLM 0.32 detects the "openai" (parts) format
    "plain": ("{% for m in messages %}{{ m.content }}{% endfor %}", False),
    "attribute": (LOOP, True),
    "item": (LOOP.replace("m.content", "m['content']"), True),
    "slice": (
        "{% set rest = messages[1:] %}{% for m in rest %}{% for c in m.content %}{{ c }}"
        "{% endfor %}{% endfor %}",
        True,
    ),
    "filter": (LOOP.replace("in messages", "in messages|selectattr('role')"), True),
    "set": (
        "{% for m in messages %}{% set content = m.content %}{% for c in content %}{{ c }}"
        "{% endfor %}{% endfor %}",
        True,
    ),
    "macro": (MACRO + "{% for m in messages %}{{ r(m.content) }}{% endfor %}", True),
    "macro keyword": (MACRO + "{% for m in messages %}{{ r(x=m.content) }}{% endfor %}", True),
    "macro of calls": (MACRO + "{% for m in messages %}{{ r(m.tool_calls) }}{% endfor %}", False),
    "content in a macro": (MACRO.replace("x", "content") + "{{ r('a') }}", False),
    # a target that is no single name: vLLM's assert fails, and it gives text
    "pair target": (LOOP.replace("for m in", "for i, m in"), False),
    "pair content target": (LOOP.replace("for c in", "for c, d in"), False),
    "pair set": ("{% set a, b = messages %}" + LOOP, False),
    "set of a set": (
        "{% set x = messages %}{% set y = x|list %}{% for m in y %}{% for c in m['content'] %}"
        "{{ c }}{% endfor %}{% endfor %}",
        True,
    ),
    "unparsable": ("{% for m in messages %}", False),
    "generation": (
        "{% for m in messages %}{% generation %}{% for c in m.content %}{{ c }}{% endfor %}"
        "{% endgeneration %}{% endfor %}",
        True,
    ),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_content_format_is_read_as_vllm_reads_it(form):
    source, parts = FORMS[form]
    assert reads_content_parts(source) is parts


@pytest.mark.parametrize(
    "name",
    [
        "vllm_gemma3_pythonic",
        "vllm_hermes",
        "vllm_llama3_1_json",
        "vllm_mistral",
        "qwen2_5_instruct",
        "qwen3",
        "deepseek_r1_jan2025",
        "deepseek_r1_distill_jan2025",
    ],
)
def test_real_templates_content_format(name):
    assert reads_content_parts(template_text(name)) is (name == "vllm_gemma3_pythonic")
