"""Prompt/response rows train the tokens verl's SFTDataset trains: the prompt rendered with
the generation prompt, then the response and the tokenizer's eos_token, each tokenized alone.

They were rendered as a user turn and an assistant turn, so the chat template chose the
trained tokens: with a Qwen-style template, `response<|im_end|>\\n`. A base tokenizer (eos
`<|endoftext|>`) was taught to stop on a token its generation does not stop on, and never
on its eos; an instruct one (eos `<|im_end|>`) trained one newline more per row.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.config import DataConfig
from trainer.data.chat import ChatFormatError, Example
from trainer.data.sft_dataset import load_sft_splits
from trainer.tiny import build_tokenizer

PROMPT, RESPONSE = "Tom has 3 apples and buys 4 more. How many?", "3 + 4 = 7.\n#### 7"


def verl_sft_item(tokenizer, prompt: str, response: str) -> tuple[list[int], list[int]]:
    """verl's SFTDataset.__getitem__ (verl/utils/dataset/sft_dataset.py), transcribed:
    its input ids, and the tokens its loss mask trains (the mask at position t weighs the
    prediction of token t + 1; it is 0 up to the prompt's last token and at the last one)."""
    prompt_chat = [{"role": "user", "content": prompt}]
    prompt_chat_str = tokenizer.apply_chat_template(
        prompt_chat, add_generation_prompt=True, tokenize=False
    )
    response_chat_str = response + tokenizer.eos_token
    prompt_ids = tokenizer(prompt_chat_str, add_special_tokens=False)["input_ids"]
    response_ids = tokenizer(response_chat_str, add_special_tokens=False)["input_ids"]
    input_ids = list(prompt_ids) + list(response_ids)
    loss_mask = [1] * len(input_ids)
    loss_mask[: len(prompt_ids) - 1] = [0] * (len(prompt_ids) - 1)
    loss_mask[len(input_ids) - 1] = 0
    trained = [input_ids[t + 1] for t in range(len(input_ids) - 1) if loss_mask[t]]
    return input_ids, trained


def trained_tokens(example: Example) -> list[int]:
    """The tokens an example has a loss on (a target with a token before it)."""
    return [token for token, m in zip(example.input_ids[1:], example.loss_mask[1:]) if m]


def tokenizer_with(eos: str, generation_markers: bool):
    """The tiny Qwen-style tokenizer with `eos` as its eos_token, its template with or
    without `{% generation %}` blocks (Qwen2.5's has none)."""
    tokenizer = build_tokenizer()
    tokenizer.eos_token = eos
    if not generation_markers:
        tokenizer.chat_template = tokenizer.chat_template.replace("{% generation %}", "").replace(
            "{% endgeneration %}", ""
        )
    return tokenizer


def load_rows(tmp_path: Path, tokenizer, rows: list[dict], **settings) -> list[Example]:
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    cfg = DataConfig(train_files=[str(path)], **{"max_length": 256, **settings})
    return load_sft_splits(cfg, tokenizer, seed=0, progress=False)[0]


MARKERS = pytest.mark.parametrize("generation_markers", [True, False], ids=["marked", "plain"])


@MARKERS
def test_an_eos_other_than_the_turn_end_ends_the_response(tmp_path, generation_markers):
    """A base model's tokenizer: eos `<|endoftext|>`, the template's turn end `<|im_end|>`."""
    tokenizer = tokenizer_with("<|endoftext|>", generation_markers)
    (example,) = load_rows(tmp_path, tokenizer, [{"prompt": PROMPT, "response": RESPONSE}])
    ids, trained = verl_sft_item(tokenizer, PROMPT, RESPONSE)
    assert example.input_ids == ids
    assert trained_tokens(example) == trained
    assert trained[-1] == tokenizer.eos_token_id != tokenizer.convert_tokens_to_ids("<|im_end|>")


@MARKERS
def test_an_eos_that_is_the_turn_end_trains_no_newline_after_it(tmp_path, generation_markers):
    """An instruct model's tokenizer: eos `<|im_end|>`, the template's turn end; the
    newline the template writes after it was trained on too."""
    tokenizer = tokenizer_with("<|im_end|>", generation_markers)
    (example,) = load_rows(tmp_path, tokenizer, [{"prompt": PROMPT, "response": RESPONSE}])
    ids, trained = verl_sft_item(tokenizer, PROMPT, RESPONSE)
    assert example.input_ids == ids
    assert trained_tokens(example) == trained
    assert example.input_ids[-1] == tokenizer.eos_token_id


def test_struct_fields_read_by_the_dict_keys_train_as_verl(tmp_path):
    """verl's GSM8K SFT example: the prompt and response are fields of `extra_info`."""
    tokenizer = tokenizer_with("<|endoftext|>", generation_markers=False)
    row = {"extra_info": {"question": PROMPT, "answer": RESPONSE}}
    (example,) = load_rows(
        tmp_path,
        tokenizer,
        [row],
        prompt_key="extra_info",
        response_key="extra_info",
        prompt_dict_keys=["question"],
        response_dict_keys=["answer"],
    )
    assert trained_tokens(example) == verl_sft_item(tokenizer, PROMPT, RESPONSE)[1]


def test_max_length_counts_the_tokens_verl_trains(tmp_path):
    """data.max_length holds the row verl makes, eos included, and refuses it a token
    shorter, counting those tokens; left truncation keeps its end, the eos."""
    tokenizer = tokenizer_with("<|endoftext|>", generation_markers=False)
    rows = [{"prompt": PROMPT, "response": RESPONSE}]
    ids, _trained = verl_sft_item(tokenizer, PROMPT, RESPONSE)
    (whole,) = load_rows(tmp_path, tokenizer, rows, max_length=len(ids))
    assert len(whole) == len(ids)
    with pytest.raises(ChatFormatError, match=rf"jsonl:1: {len(ids)} tokens > data.max_length"):
        load_rows(tmp_path, tokenizer, rows, max_length=len(ids) - 1)
    (left,) = load_rows(tmp_path, tokenizer, rows, max_length=8, truncation="left")
    assert left.input_ids == ids[-8:] and left.loss_mask[-1] == 1


def test_messages_rows_still_train_the_templates_assistant_turn(tmp_path):
    """`messages` rows follow verl's MultiTurnSFTDataset: the template's assistant turn,
    its turn end included (the newline outside the `{% generation %}` block too), whatever
    the eos_token."""
    tokenizer = tokenizer_with("<|endoftext|>", generation_markers=True)
    turns = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": RESPONSE}]
    (example,) = load_rows(tmp_path, tokenizer, [{"messages": turns}])
    assert tokenizer.decode(trained_tokens(example)) == RESPONSE + "<|im_end|>\n"


def test_a_tokenizer_without_an_eos_token_is_refused_for_prompt_response_rows(tmp_path):
    """verl's SFTDataset fails on `response + None`; nothing else says where to stop."""
    from transformers import AutoTokenizer

    saved = build_tokenizer()
    saved.eos_token = None
    saved.save_pretrained(tmp_path / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "tokenizer"))
    with pytest.raises(ChatFormatError) as caught:
        load_rows(tmp_path, tokenizer, [{"prompt": PROMPT, "response": RESPONSE}])
    assert str(caught.value) == (
        f"{tmp_path}/train.jsonl:1: the tokenizer of {tmp_path}/tokenizer has no eos_token"
        " (tokenizer_config.json), which a prompt/response row's response ends with, as in"
        " verl's SFTDataset; set it there, or give the rows as messages"
    )
    turns = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": RESPONSE}]
    assert load_rows(tmp_path, tokenizer, [{"messages": turns}])[0].num_targets > 0
