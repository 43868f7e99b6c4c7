"""Each turn's content reaches the chat template as text, as verl's datasets hand it to
apply_chat_template; only where a template that loops over a turn's content (vLLM's
"openai" content format, Gemma 3's) cannot render that, each null content is handed as
vLLM 0.32 hands it, no parts.

Was: the text went to every template, and Gemma 3's, given OpenAI's null content of a turn
that only calls tools, raised "Invalid content type": the row was refused, telling its
writer to store '' though vLLM serves it. Then every content went as parts to every
template looping over content, and templates that also read it as text broke:
Llama-3.2-Vision's system prompt (`messages[0]['content']|trim`) and ipython turns
(`|tojson`) were trained and prompted as the parts list's repr, exit 0; every row of
Mistral-Small-3.1's (`message['content'] + eos_token`) was refused; and a template whose
variables are set from each other made the detection loop until the row's time ran out.
The detection is read off vLLM's `_detect_content_format` (importing vLLM takes some 15 s,
too long for a test).
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


def test_a_template_looping_over_content_is_given_text_and_parts_for_null_only():
    """The text form fails on the null content (a loop over None), so the null contents
    alone are given as vLLM hands them, no parts, a tool turn's "" (vLLM joins a tool
    turn's parts to text); the others stay text."""
    tokenizer = qwen_tokenizer("qwen2_5_instruct")
    tokenizer.chat_template = SHOWS_FORM
    turns = [
        {"role": "system", "content": "Be brief."},
        USER,
        calling(None),
        RESULT,
        {**RESULT, "content": None},
        ANSWER,
    ]
    text = chat_ids(tokenizer, turns, row_limit(tokenizer, "data.max_length", 512))["text"]
    assert text == (
        "text Be brief.|text Weather in Oslo?|parts|text 20|text |text It is 20 degrees.|"
    )


# Llama-3.2-11B/90B-Vision-Instruct's chat template, the lines that read content verbatim
# (its tools-in-user-message block and date left out)
LLAMA_3_2_VISION = r"""{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{% set image_ns = namespace(has_images=false) %}
{%- for message in messages %}
    {%- for content in message['content'] %}
        {%- if content['type'] == 'image' %}
            {%- set image_ns.has_images = true %}
        {%- endif %}
    {%- endfor %}
{%- endfor %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}
        {%- if message['content'] is string %}
            {{- message['content'] }}
        {%- else %}
            {%- for content in message['content'] %}
                {%- if content['type'] == 'image' %}
                    {{- '<|image|>' }}
                {%- elif content['type'] == 'text' %}
                    {{- content['text'] }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""
SYSTEM = {"role": "system", "content": "Be brief."}
SYSTEM_PROMPT = "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"


def test_llama_3_2_vision_trains_and_prompts_the_system_text(tmp_path):
    """Its system prompt is `messages[0]['content']|trim`: given parts, the list's repr."""
    llama = qwen_tokenizer("qwen2_5_instruct")
    llama.chat_template = LLAMA_3_2_VISION
    chat = [SYSTEM, USER, ANSWER]
    (example,) = sft_rows(llama, tmp_path / "sft.jsonl", [chat])
    assert SYSTEM_PROMPT in llama.decode(example.input_ids)
    assert trained_text(llama, example) == "It is 20 degrees.<|eot_id|>"
    prompt = llama.decode(grpo_prompt_ids(llama, tmp_path / "rl.jsonl", [SYSTEM, USER]))
    assert SYSTEM_PROMPT in prompt
    assert "'type'" not in prompt


def test_llama_3_2_vision_null_content_as_no_parts_the_rest_as_text(tmp_path):
    """Its image scan loops over every content, None too: that alone goes as no parts."""
    llama = qwen_tokenizer("qwen2_5_instruct")
    llama.chat_template = LLAMA_3_2_VISION
    chat = [SYSTEM, USER, calling(None), {"role": "ipython", "content": "20"}, ANSWER]
    (example,) = sft_rows(llama, tmp_path / "sft.jsonl", [chat])
    text = llama.decode(example.input_ids)
    assert SYSTEM_PROMPT in text
    assert '{"name": "get_weather", "parameters": {"city": "Oslo"}}<|eot_id|>' in text
    assert '<|start_header_id|>ipython<|end_header_id|>\n\n"20"<|eot_id|>' in text


# Mistral-Small-3.1-24B-Instruct-2503's (and 3.2-2506's) chat template, the lines that read
# content verbatim (its default system message shortened)
MISTRAL_SMALL_3_1 = """{%- set default_system_message = "You are Mistral Small 3." %}
{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- if messages[0]['content'] is string %}
        {%- set system_message = messages[0]['content'] %}
    {%- else %}
        {%- set system_message = messages[0]['content'][0]['text'] %}
    {%- endif %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = default_system_message %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}
{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
        {%- if message['content'] is string %}
            {{- '[INST]' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST]' }}
            {%- for block in message['content'] %}
                {%- if block['type'] == 'text' %}
                    {{- block['text'] }}
                {%- endif %}
            {%- endfor %}
            {{- '[/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- message['content'] + eos_token }}
    {%- endif %}
{%- endfor %}
"""


def test_mistral_small_3_1_trains_its_assistant_text(tmp_path):
    """Its assistant turns are `message['content'] + eos_token`: given parts, it raised."""
    mistral = qwen_tokenizer("qwen2_5_instruct")
    mistral.chat_template = MISTRAL_SMALL_3_1
    chat = [SYSTEM, USER, ANSWER, AGAIN, {"role": "assistant", "content": "Still 20."}]
    (example,) = sft_rows(mistral, tmp_path / "sft.jsonl", [chat])
    eos = mistral.eos_token
    assert trained_text(mistral, example) == f"It is 20 degrees.{eos}Still 20.{eos}"


# variables set from each other, then a loop over content (parts) that fails on a None
SETS_EACH_OTHER = (
    "{% set msgs = messages %}{% set messages = msgs %}{% for m in messages %}"
    "{% if m.content is string %}{{ m.content }}{% else %}{% for c in m.content %}{{ c.text }}"
    "{% endfor %}{% endif %}|{% endfor %}"
)


def test_detection_ends_for_variables_set_from_each_other(monkeypatch):
    """Each name is followed once: the detection looped until the row's time ran out."""
    monkeypatch.setattr("trainer.data.chat.TEMPLATE_SECONDS", 2.0)
    tokenizer = qwen_tokenizer("qwen2_5_instruct")
    tokenizer.chat_template = SETS_EACH_OTHER
    limit = row_limit(tokenizer, "data.max_length", 512)
    assert chat_ids(tokenizer, [USER, calling(None)], limit)["text"] == "Weather in Oslo?||"
    assert reads_content_parts(SETS_EACH_OTHER)


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
