"""A chat template's `{% generation %}` blocks, however spelt, render, and train what verl's
MultiTurnSFTDataset trains: every token of an assistant turn after the generation prompt,
text the template's author left out of the blocks included (verl reads no blocks).

`{%- generation -%}` was once refused as having no markers; the blocks then decided what
trained, and a block holding the content only trained no end-of-turn token.
"""

import pytest

from tests.support.verl_multiturn import verl_row
from trainer.data.chat import row_limit, tokenize_chat
from trainer.tiny import build_tokenizer

CHAT = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "yo"},
    {"role": "user", "content": "and?"},
    {"role": "assistant", "content": "done"},
]
# Only the reply is in the block; verl trains the note and <|im_end|> after it too. The
# turn's header is an expression, so that `{%- generation` strips no newline of it (a turn
# that does not start with the generation prompt is refused: test_generation_prompt_prefix)
TEMPLATE = (
    "{% for m in messages %}{% if m.role == 'assistant' %}{{ '<|im_start|>assistant\\n' }}"
    "{START} {{ m.content }} {END} (a note outside the block)<|im_end|>\n"
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
def test_every_spelling_trains_what_verl_trains(tokenizer, start, end):
    tokenizer.chat_template = TEMPLATE.replace("{START}", start).replace("{END}", end)
    example = tokenize_chat(tokenizer, CHAT, row_limit(tokenizer, "data.max_length", 512))
    assert (example.input_ids, example.loss_mask) == verl_row(tokenizer, CHAT)
    trained = tokenizer.decode([t for t, m in zip(example.input_ids, example.loss_mask) if m])
    assert trained.count("(a note outside the block)<|im_end|>\n") == 2


def test_the_default_of_named_templates_is_the_one_rendered(tokenizer):
    """A tokenizer with several named templates renders its `default`."""
    marked = TEMPLATE.replace("{START}", STARTS[0]).replace("{END}", ENDS[0])
    tokenizer.chat_template = {"default": marked, "tool_use": "{{ messages }}"}
    example = tokenize_chat(tokenizer, CHAT, row_limit(tokenizer, "data.max_length", 512))
    assert (example.input_ids, example.loss_mask) == verl_row(tokenizer, CHAT)
    assert any(example.loss_mask)
