"""A chat template's `{% generation %}` blocks, however spelt, mark what trains.

Only `{% generation %}` and `{%- generation %}` were recognised: with `{% generation -%}`
or `{%generation%}` the chat was taken by prefixes and trained on text the template left
out of its blocks, and `{%- generation -%}` was refused as having no markers.
"""

import pytest

from trainer.data.chat import row_limit, tokenize_chat
from trainer.tiny import build_tokenizer

CHAT = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "yo"},
    {"role": "user", "content": "and?"},
    {"role": "assistant", "content": "done"},
]
# Only the reply is in the block: the note and <|im_end|> after it are not to be trained
TEMPLATE = (
    "{% for m in messages %}{% if m.role == 'assistant' %}<|im_start|>assistant\n"
    "{START} {{ m.content }} {END} (note: not to be trained)<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
STARTS = [
    "{% generation %}",
    "{%- generation %}",
    "{% generation -%}",
    "{%- generation -%}",
    "{%generation%}",
    "{%-generation-%}",
    "{%  generation\n%}",
]
ENDS = ["{% endgeneration %}", "{%- endgeneration -%}", "{%endgeneration%}"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.mark.parametrize("end", ENDS)
@pytest.mark.parametrize("start", STARTS)
def test_every_spelling_trains_what_transformers_masks(tokenizer, start, end):
    tokenizer.chat_template = TEMPLATE.replace("{START}", start).replace("{END}", end)
    expected = tokenizer.apply_chat_template(
        CHAT, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assert any(expected["assistant_masks"])
    example = tokenize_chat(tokenizer, CHAT, row_limit(tokenizer, "data.max_length", 512))
    assert example.input_ids == list(expected["input_ids"])
    assert example.loss_mask == list(expected["assistant_masks"])


def test_the_default_of_named_templates_is_the_one_read_for_markers(tokenizer):
    """A tokenizer with several named templates renders its `default`: its markers count."""
    marked = TEMPLATE.replace("{START}", STARTS[0]).replace("{END}", ENDS[0])
    tokenizer.chat_template = {"default": marked, "tool_use": "{{ messages }}"}
    expected = tokenizer.apply_chat_template(
        CHAT, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    example = tokenize_chat(tokenizer, CHAT, row_limit(tokenizer, "data.max_length", 512))
    assert example.loss_mask == list(expected["assistant_masks"]) and any(example.loss_mask)
