"""Chat templates render as transformers renders them, with every value bounded
(trainer/data/template_sandbox.py): `{{ 'a' * 600000000 }}` (63 bytes) made 600 MB in one C
call and the tokenizer then aborted the process; the bound holds for every operation that
can grow a value, so a template that tries another is refused in bounded memory and time."""

from __future__ import annotations

import json
import shutil
import time
import tracemalloc
from pathlib import Path

import pytest
from jinja2.exceptions import SecurityError

from trainer.config import DataConfig, ModelConfig
from trainer.data.chat import MAX_ROW_CHARS, ChatFormatError, chat_ids, row_limit, tokenize_chat
from trainer.data.sft_dataset import tokenize_rows
from trainer.data.template_sandbox import MAX_INT_BITS, TemplateSizeError, render
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.model import load_tokenizer
from trainer.tiny import build_tokenizer

# Qwen2.5's template in outline (tools, system default, tool turns, loop.last, tojson)
QWEN_LIKE = """{%- if tools %}{{- '<|im_start|>system\\n' }}{%- for tool in tools %}{{- '\\n' }}\
{{- tool | tojson }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- else %}\
{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] \
+ '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are helpful.<|im_end|>\\n' }}\
{%- endif %}{%- endif %}{%- for message in messages %}{%- if (message.role == "user") or \
(message.role == "system" and not loop.first) or (message.role == "assistant") %}\
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\
{%- elif message.role == "tool" %}{%- if (loop.index0 == 0) or \
(messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}\
{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}\
{%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\\n' }}\
{%- endif %}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}\
{{- '<|im_start|>assistant\\n' }}{%- endif %}"""

# Qwen3's and Llama 3's devices: namespace, string methods, filters, macros, ~, %
DEVICES = """{%- set ns = namespace(last_user=0, n=0) %}{%- macro turn(role, text) -%}
<|im_start|>{{ role }}\n{{ text | trim }}<|im_end|>\n{% endmacro -%}
{{ bos_token if bos_token else '' }}{%- for m in messages %}{%- if m.role == 'user' %}\
{%- set ns.last_user = loop.index0 %}{%- endif %}{%- set ns.n = ns.n + 1 %}{%- endfor %}\
{%- for m in messages %}{%- set text = m.content.split('</think>')[-1].lstrip('\\n') %}\
{%- if m.role == 'assistant' and loop.index0 > ns.last_user %}{{ turn(m.role, text) }}\
{%- else %}{{ turn(m.role, '%s' % text ~ ('' if loop.last else '')) }}{%- endif %}\
{%- endfor %}{{ '# %d turns, %s\\n' % (ns.n, messages | map(attribute='role') | join(',')) }}\
{{ 'x' * 3 }}{{ (messages | length) ** 2 }}{{ '{:>4}'.format(ns.n) | center(8) }}\
{{ messages | selectattr('role', 'eq', 'user') | list | length }}{{ eos_token }}\
{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"""

CHATS = [
    [{"role": "user", "content": "1 + 2?"}, {"role": "assistant", "content": "3"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Tom has 3 apples and buys 4 more."},
        {"role": "assistant", "content": "<think>3 + 4</think>\n\n#### 7"},
        {"role": "tool", "content": '{"apples": 7}'},
        {"role": "user", "content": 'And 2 "more"? \\n ünïcode 😀'},
    ],
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.mark.parametrize("template", ["tiny", "qwen-like", "devices"])
@pytest.mark.parametrize("chat", range(len(CHATS)))
@pytest.mark.parametrize("prompt", [False, True])
def test_a_template_renders_and_tokenizes_as_transformers_does(tokenizer, template, chat, prompt):
    templates = {"tiny": tokenizer.chat_template, "qwen-like": QWEN_LIKE, "devices": DEVICES}
    tokenizer = build_tokenizer()
    tokenizer.chat_template = templates[template]
    turns, limit = CHATS[chat], row_limit(tokenizer, "data.max_length", 4096)
    theirs = tokenizer.apply_chat_template(turns, add_generation_prompt=prompt, return_dict=True)
    ours = chat_ids(tokenizer, turns, limit, add_generation_prompt=prompt)
    rendered = ours.pop("text")
    assert ours == {"input_ids": list(theirs["input_ids"])}
    assert rendered == tokenizer.apply_chat_template(
        turns, tokenize=False, add_generation_prompt=prompt
    )
    text = render(
        tokenizer.chat_template,
        limit.chars,
        messages=turns,
        add_generation_prompt=prompt,
        **tokenizer.special_tokens_map,
    )
    assert text == tokenizer.apply_chat_template(
        turns, tokenize=False, add_generation_prompt=prompt
    )


MESSAGES = [{"role": "user", "content": "0123456789"}]
# Each makes far more than LIMIT characters, in one operation or across many.
GROWING = {
    "repeat": "{{ 'a' * 600000000 }}",
    "repeat-list": "{{ ([messages] * 10**6) | string }}",
    "power": "{{ 'a' * 10 ** 12 }}",
    "doubling-tilde": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "doubling-plus": "{% set ns = namespace(s=['ab']) %}{% for i in range(60) %}"
    "{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "percent-width": "{{ '%0999999999d' % 1 }}",
    "percent-repeat": "{{ ('%(a)s' * 9000) % {'a': 'x' * 9000} }}",
    "format-width": "{{ '{:>999999999}'.format(1) }}",
    "format-repeat": "{{ ('{0}' * 9000).format('x' * 9000) }}",
    "format-filter": "{{ '%0999999999d' | format(1) }}",
    "ljust": "{{ 'ab'.ljust(10 ** 9) }}",
    "zfill": "{{ 'ab'.zfill(10 ** 9) }}",
    "expandtabs": "{{ ('\\t' * 9000).expandtabs(9000) }}",
    "replace-empty": "{{ ('a' * 9000).replace('', 'b' * 9000) }}",
    "join-method": "{{ ('x' * 9000).join(['y' * 9000] * 9) }}",
    "translate": "{{ ('a' * 9000).translate({97: 'b' * 9000}) }}",
    "center": "{{ 'a' | center(10 ** 9) }}",
    "indent": "{{ ('a\\n' * 4000) | indent('x' * 4000) }}",
    "join-filter": "{{ (['y'] * 9000) | join('x' * 9000) }}",
    "replace-filter": "{{ ('a' * 9000) | replace('a', 'b' * 9000) }}",
    "wordwrap": "{{ ('a ' * 4000) | wordwrap(1, wrapstring='x' * 9000) }}",
    "batch": "{{ messages | batch(10 ** 9, 'x') | list }}",
    "slice": "{{ messages | slice(10 ** 9) | list | length }}",
    "map-center": "{{ range(99999) | map('center', 9999) | list | length }}",
    "map-join": "{{ range(99999) | map('center', 9999) | join }}",
    "loop-length": "{% for x in range(99999) | map('center', 9999) %}{{ loop.length }}{% endfor %}",
    "tojson-items": "{{ ([messages] * 3000) | tojson(indent=8) }}",
    "bytes-percent": "{{ 'x%0999999999d'.encode() % 1 }}",
    "output-loop": "{% for i in range(99999) %}{{ 'x' * 999 }}{% endfor %}",
    "macro-loop": "{% macro m() %}{% for i in range(99999) %}{{ 'x' * 999 }}{% endfor %}"
    "{% endmacro %}{{ m() }}",
    "set-block": "{% set b %}{% for i in range(99999) %}{{ 'x' * 999 }}{% endfor %}{% endset %}",
    "list-literal": "{% set s = 'x' * 9000 %}{{ [s, s, s, s, s, s, s, s, s, s, s, s] }}",
    "constant-concat": "{{ ('x' | center(60000)) ~ ('x' | center(60000)) }}",
}
LIMIT = 100_000


@pytest.mark.parametrize("case", list(GROWING))
def test_a_template_cannot_make_a_value_past_the_limit(case):
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(TemplateSizeError, match="would make over"):
            render(GROWING[case], LIMIT, messages=MESSAGES)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 10
    assert peak < 40 * LIMIT, f"{peak} bytes"  # a few values of the limit, never more


def test_integers_stay_small():
    with pytest.raises(SecurityError, match=f"integer of over {MAX_INT_BITS} bits"):
        render("{{ 7 ** 999999999 }}", LIMIT)
    with pytest.raises(SecurityError, match="integer of over"):
        render(
            "{% set ns = namespace(n=3) %}{% for i in range(99) %}{% set ns.n = ns.n * ns.n %}"
            "{% endfor %}",
            LIMIT,
        )
    assert render("{{ 2 ** 64 }}", LIMIT) == str(2**64)
    with pytest.raises(SecurityError, match="indent and separators would make over"):
        render("{{ messages | tojson(indent=10 ** 9) }}", LIMIT, messages=MESSAGES)


@pytest.mark.parametrize(
    "template", ["{{ x | pprint }}", "{{ x | urlize }}", "{{ lipsum(10 ** 7) }}"]
)
def test_what_no_chat_template_needs_is_not_offered(template):
    with pytest.raises(Exception, match=r"pprint|urlize|lipsum"):
        render(template, LIMIT, x="y")


def test_a_row_rendering_past_its_limit_is_one_line_naming_the_template_file(trainable, tmp_path):
    model = Path(shutil.copytree(trainable[0], tmp_path / "model"))
    template = model / "chat_template.jinja"
    template.write_text("{{ 'a' * 600000000 }}{% for m in messages %}{{ m.content }}{% endfor %}")
    tokenizer = load_tokenizer(ModelConfig(path=str(model)))
    rows = tmp_path / "rows.jsonl"
    row = {
        "messages": CHATS[0],
        "prompt": CHATS[0][:1],
        "data_source": "openai/gsm8k",
        "reward_model": {"ground_truth": "3"},
    }
    rows.write_text(json.dumps(row) + "\n")
    says = f"the chat template in {template}: rendering it, 'a' * 600000000 would make over"
    for truncation, limit in (
        ("error", "more text than data.max_length=1024 tokens can hold"),
        ("left", f"more than the {MAX_ROW_CHARS} characters of text a row may have"),
    ):
        with pytest.raises(ChatFormatError) as sft:
            data = DataConfig(truncation=truncation)
            tokenize_rows([row], data, tokenizer, lambda i: f"{rows}:{i + 1}", False)
        assert str(sft.value).startswith(f"{rows}:1: {says}") and limit in str(sft.value)
    for dropping, starts in ((False, f"{rows}:1: {says}"), (True, f"{rows}: all 1 prompts")):
        with pytest.raises(RLDataError) as rl:  # refused, or dropped as over-long: none left
            load_rl_prompts([str(rows)], RLDataConfig(filter_overlong_prompts=dropping), tokenizer)
        assert str(rl.value).startswith(starts) and f"{rows}:1: {says}" in str(rl.value)
        assert "data.max_prompt_length=512 tokens can hold" in str(rl.value)


def test_a_long_row_is_truncated_as_asked_within_the_bound(tokenizer):
    """Text longer than the token limit holds is fine when it is to be truncated."""
    turns = [{"role": "user", "content": "word " * 400}, {"role": "assistant", "content": "7"}]
    strict, truncated = (row_limit(tokenizer, "data.max_length", 24, t) for t in (False, True))
    with pytest.raises(ChatFormatError, match=r"data\.max_length=24 tokens can hold"):
        tokenize_chat(tokenizer, turns, strict)
    assert len(tokenize_chat(tokenizer, turns, truncated)) > 24
