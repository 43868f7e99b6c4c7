"""Which columns train when a row holds both a `messages` chat and prompt/response columns.

A row's `messages` won whenever it had one: the prompt and response a config named
(verl's GSM8K SFT example: extra_info's question and answer) were never read, and
`data.multiturn.enable=false`, verl's default, which trains them there, was ignored, with
nothing said. Named prompt/response keys or `data.chat_columns=prompt_response` (verl's
multiturn.enable=false) train them; `messages` (multiturn.enable=true) trains the chat;
left to itself the chat trains, and one note names the first such row and the key.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.config import SFTConfig, load_config
from trainer.data.sft_dataset import load_sft_splits
from trainer.tiny import build_tokenizer

CHAT = [{"role": "user", "content": "MSG-Q"}, {"role": "assistant", "content": "MSG-A"}]
ROW = {
    "messages": CHAT,
    "prompt": "PR-Q",
    "response": "PR-A",
    "extra_info": {"question": "EI-Q", "answer": "EI-A"},
}
EXTRA_INFO = [
    "data.prompt_key=extra_info",
    "data.response_key=extra_info",
    "data.prompt_dict_keys=[question]",
    "data.response_dict_keys=[answer]",
]


def _trained(tmp_path, keys: list[str]) -> list[str]:
    """The text each row trains on (its loss-masked tokens decoded), loaded as a run loads."""
    path = tmp_path / "both.parquet"
    pq.write_table(pa.Table.from_pylist([ROW] * 3), path)
    cfg = load_config(SFTConfig, None, [f"data.train_files=[{path}]", "data.val_ratio=0", *keys])
    tokenizer = build_tokenizer()
    train, _ = load_sft_splits(cfg.data, tokenizer, 0, False)
    return [
        tokenizer.decode([token for token, mask in zip(e.input_ids, e.loss_mask) if mask])
        for e in train
    ]


@pytest.mark.parametrize(
    "keys, answer",
    [
        (EXTRA_INFO, "EI-A"),  # named keys: verl's run_qwen_05 shape
        (["data.chat_columns=prompt_response"], "PR-A"),
        (["data.multiturn.enable=false"], "PR-A"),  # verl's own key and default
        (["data.multiturn.enable=true", *EXTRA_INFO], "MSG-A"),
        (["data.chat_columns=messages"], "MSG-A"),
    ],
)
def test_the_columns_picked_train_and_no_note_is_given(tmp_path, caplog, keys, answer):
    with caplog.at_level(logging.WARNING, logger="mfsdp.data"):
        trained = _trained(tmp_path, keys)
    assert len(trained) == 3 and all(text.startswith(answer) for text in trained), trained
    assert not any("both a 'messages' column" in r.getMessage() for r in caplog.records)


def test_with_nothing_picked_the_chat_trains_and_one_note_names_the_key(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.data"):
        trained = _trained(tmp_path, [])
    assert all(text.startswith("MSG-A") for text in trained), trained
    notes = [r.getMessage() for r in caplog.records if "both" in r.getMessage()]
    assert notes == [
        f"note: {tmp_path / 'both.parquet'} row 1 (and 2 more rows): both a 'messages' column"
        " and 'prompt'/'response' columns; 'messages' trains (data.chat_columns=prompt_response,"
        " verl's data.multiturn.enable=false, trains 'prompt'/'response')"
    ], notes


def test_picked_messages_refuses_a_row_without_them(tmp_path):
    path = tmp_path / "pr.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "q", "response": "a"}]), path)
    cfg = load_config(
        SFTConfig,
        None,
        [f"data.train_files=[{path}]", "data.val_ratio=0", "data.chat_columns=messages"],
    )
    with pytest.raises(ValueError, match=r"pr\.parquet row 1: no 'messages' column"):
        load_sft_splits(cfg.data, build_tokenizer(), 0, False)
