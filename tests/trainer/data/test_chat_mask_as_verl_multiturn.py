"""A `messages` row's loss mask is verl's MultiTurnSFTDataset's, whatever the chat template's
`{% generation %}` blocks cover: verl never reads them, and trains every token of an
assistant turn after the generation prompt, its end-of-turn tokens included. The blocks
decided here: a template whose block held the content only, its `<|im_end|>` after
`{% endgeneration %}`, trained no end-of-turn token in any row, silently, so the model
never learned to stop."""

from __future__ import annotations

import json

import pytest

from tests.support.verl_multiturn import verl_row
from trainer.config import DataConfig
from trainer.data.chat import ChatFormatError, row_limit, tokenize_chat
from trainer.data.sft_dataset import load_sft_splits
from trainer.tiny import CHAT_TEMPLATE, build_tokenizer

_OTHER_TURNS = (
    "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _template(assistant_turn: str) -> str:
    return (
        "{% for message in messages %}{% if message['role'] == 'assistant' %}"
        + assistant_turn
        + _OTHER_TURNS
    )


TEMPLATES = {
    # the block holds the content only; the turn end follows it (TRL-style masks)
    "content-only": _template(
        "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] }}"
        "{% endgeneration %}{{ '<|im_end|>\\n' }}"
    ),
    # the block holds the whole turn, its header included
    "whole-turn": _template(
        "{% generation %}{{ '<|im_start|>assistant\\n' + message['content'] + '<|im_end|>\\n' }}"
        "{% endgeneration %}"
    ),
    # the block is empty: it marks nothing
    "empty-block": _template(
        "{{ '<|im_start|>assistant\\n' }}{%- generation -%}{%- endgeneration -%}"
        "{{ message['content'] + '<|im_end|>\\n' }}"
    ),
    "tiny": CHAT_TEMPLATE,  # the embedded model's: the newline after the block
}
CHATS = [
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Tom has 3 apples and buys 4 more."},
        {"role": "assistant", "content": "Tom has 3 + 4 = 7 apples.\n#### 7"},
        {"role": "user", "content": "And 5 more?"},
        {"role": "assistant", "content": "#### 12"},
    ],
    [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "#### 4"}],
]


def _tokenizer(template: str):
    tokenizer = build_tokenizer()
    tokenizer.chat_template = template
    return tokenizer


@pytest.mark.parametrize("chat", range(len(CHATS)))
@pytest.mark.parametrize("template", list(TEMPLATES))
def test_the_mask_is_verls_whatever_the_generation_blocks_cover(template, chat):
    tokenizer = _tokenizer(TEMPLATES[template])
    messages = CHATS[chat]
    example = tokenize_chat(tokenizer, messages, row_limit(tokenizer, "data.max_length", 1024))
    assert (example.input_ids, example.loss_mask) == verl_row(tokenizer, messages)
    # each assistant turn's end is trained: as many trained <|im_end|> as assistant turns
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    trained_ends = sum(
        1 for token, m in zip(example.input_ids, example.loss_mask) if m and token == im_end
    )
    assert trained_ends == sum(turn["role"] == "assistant" for turn in messages)


def test_rows_of_a_content_only_block_template_train_the_eos(tmp_path):
    """Through the loader `mfsdp train sft` reads rows with: every row trains its
    assistant turns' `<|im_end|>` (this tokenizer's eos) and the newline after it."""
    tokenizer = _tokenizer(TEMPLATES["content-only"])
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"messages": chat}) + "\n" for chat in CHATS))
    train, _ = load_sft_splits(
        DataConfig(train_files=[str(path)], max_length=1024), tokenizer, seed=0, progress=False
    )
    assert len(train) == len(CHATS)
    for example in train:
        trained = tokenizer.decode([t for t, m in zip(example.input_ids, example.loss_mask) if m])
        assert trained.endswith("<|im_end|>\n") and tokenizer.eos_token == "<|im_end|>"


# An assistant turn followed by later turns renders without its reasoning (Qwen3's template
# drops an earlier turn's <think> block): the conversation is not rendered prefix by prefix.
_DROPS_EARLIER_REASONING = _template(
    "{{ '<|im_start|>assistant\\n' }}{% if loop.last %}{{ '<think>x</think>' }}{% endif %}"
    "{{ message['content'] + '<|im_end|>\\n' }}"
)


def test_a_template_dropping_earlier_reasoning_is_refused_as_verl_refuses_it():
    tokenizer = _tokenizer(_DROPS_EARLIER_REASONING)
    limit = row_limit(tokenizer, "data.max_length", 1024)
    with pytest.raises(ChatFormatError) as err:
        tokenize_chat(tokenizer, CHATS[0], limit)
    said = str(err.value)
    assert "does not render conversations prefix by prefix (turn 3 renders otherwise" in said
    assert "verl's MultiTurnSFTDataset refuses such a chat too" in said
    assert "its turns rendered one at a time are not the chat rendered whole" in said
    # the single-turn row trains, as in verl: its one turn renders alike alone and whole
    example = tokenize_chat(tokenizer, CHATS[1], limit)
    assert sum(example.loss_mask) > 0
