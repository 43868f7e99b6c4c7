"""Rows of verl's own GSM8K/MATH preprocess output (data_source, prompt as chat turns,
ability, reward_model {style, ground_truth}, extra_info {split, index, question, answer}),
and such rows with one value broken: each trains, or is refused in one line that names its
file, its row and the column. An SFT row whose messages or prompt turns were not chat turns
(a list of ints, a turn with null content) or an empty messages list was named by its value
alone ("each chat turn needs 'role' and 'content', found 1"), not by the column.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mfsdp_ckpt.errors import MfsdpError
from trainer.config import SFTConfig, load_config
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

EXTRA_INFO = [
    "data.prompt_key=extra_info",
    "data.response_key=extra_info",
    "data.prompt_dict_keys=[question]",
    "data.response_dict_keys=[answer]",
]
CHAT = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]


def _verl_row(index: int) -> dict[str, Any]:
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": f"What is {index}+1? Answer after ####."}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(index + 1)},
        "extra_info": {
            "split": "train",
            "index": index,
            "question": f"What is {index}+1?",
            "answer": f"{index}+1={index + 1} #### {index + 1}",
        },
    }


def _set(dotted: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(row: dict[str, Any]) -> None:
        *parents, key = dotted.split(".")
        for name in parents:
            row = row[name]
        row[key] = value

    return mutate


# (reader, config keys, the second row's change (None: verl's row as it is), None where it
# trains, else the column and words its refusal says)
GRPO, SFT = "grpo", "sft"
CASES = {
    "grpo-verl-rows": (GRPO, [], None, None),
    "sft-extra-info": (SFT, EXTRA_INFO, None, None),
    "grpo-null-prompt": (GRPO, [], _set("prompt", None), "prompt must be text"),
    "grpo-empty-prompt-turns": (GRPO, [], _set("prompt", []), "prompt must be text"),
    "grpo-null-ground-truth": (
        GRPO,
        [],
        _set("reward_model.ground_truth", None),
        "reward_model.ground_truth is null",
    ),
    "grpo-null-reward-model": (GRPO, [], _set("reward_model", None), "reward_model.ground_truth"),
    "grpo-null-turn-content": (
        GRPO,
        [],
        _set("prompt", [{"role": "user", "content": None}]),
        "prompt must be text",
    ),
    "sft-null-extra-info": (SFT, EXTRA_INFO, _set("extra_info", None), "'extra_info' is null"),
    "sft-null-question": (
        SFT,
        EXTRA_INFO,
        _set("extra_info.question", None),
        "the prompt ('extra_info.question') is null",
    ),
    "sft-null-turn-content": (
        SFT,
        ["data.response_key=ability"],
        _set("prompt", [{"role": "user", "content": None}]),
        "'prompt': a chat turn's role and content must be text",
    ),
    "sft-empty-messages": (SFT, [], _set("messages", []), "the 'messages' cell is an empty list"),
    "sft-null-messages": (SFT, [], _set("messages", None), "the 'messages' cell is null"),
    "sft-messages-without-assistant": (
        SFT,
        [],
        _set("messages", CHAT[:1]),
        "the conversation has no assistant turn to learn from ('messages')",
    ),
}


def _write(tmp_path, suffix: str, rows: list[dict[str, Any]], extra: dict[str, Any]) -> str:
    path = tmp_path / f"rows{suffix}"
    if suffix == ".parquet":
        table = pa.Table.from_pylist(rows)
        for name, column in extra.items():
            table = table.append_column(name, column)
        pq.write_table(table, path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _load(reader: str, path: str, keys: list[str]) -> None:
    tokenizer = build_tokenizer()
    if reader == GRPO:
        load_rl_prompts([path], RLDataConfig(), tokenizer)
        return
    cfg = load_config(SFTConfig, None, [f"data.train_files=[{path}]", "data.val_ratio=0", *keys])
    load_sft_splits(cfg.data, tokenizer, 0, False)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_row_trains_or_is_named_with_its_file_row_and_column(tmp_path, suffix, case):
    reader, keys, mutate, refused = CASES[case]
    rows = [_verl_row(index) for index in range(3)]
    if "messages" in case:
        for row in rows:
            row["messages"] = copy.deepcopy(CHAT)
    if mutate is not None:
        mutate(rows[1])
    path = _write(tmp_path, suffix, rows, {})
    if refused is None:
        _load(reader, path, keys)
        return
    where = f"{path} row 2" if suffix == ".parquet" else f"{path}:2"
    with pytest.raises(MfsdpError) as error:
        _load(reader, path, keys)
    said = str(error.value)
    assert said.startswith(f"{where}: ") and refused in said and "\n" not in said, said


def test_a_list_of_ints_as_chat_turns_names_the_column(tmp_path):
    """A whole column of lists of ints (token ids, say) as the messages or prompt read."""
    ids = pa.array([[1, 2, 3]] * 3)
    rows = [_verl_row(index) for index in range(3)]
    for column, keys in (("messages", []), ("prompt", ["data.response_key=ability"])):
        table = pa.Table.from_pylist(rows).drop_columns(["prompt"]).append_column(column, ids)
        path = tmp_path / f"{column}.parquet"
        pq.write_table(table, path)
        with pytest.raises(MfsdpError) as error:
            _load(SFT, str(path), keys)
        assert str(error.value) == (
            f"{path} row 1: '{column}': each chat turn needs 'role' and 'content', found 1"
        )


@pytest.mark.parametrize("reader, keys", [(GRPO, []), (SFT, EXTRA_INFO)])
def test_unread_nested_and_int_list_columns_train(tmp_path, reader, keys):
    """Columns the run does not read, a list of ints and a list of structs (stored as verl's
    multimodal `images` are: that column itself is refused, test_multimodal_tables_refused),
    beside the verl columns: the rows train."""
    extra = {
        "input_ids": pa.array([[1, 2, 3]] * 3),
        "attachments": pa.array([[{"bytes": b"\x89PNG", "path": None}]] * 3),
    }
    path = _write(tmp_path, ".parquet", [_verl_row(index) for index in range(3)], extra)
    _load(reader, path, keys)


def test_an_empty_text_prompt_is_named(tmp_path):
    """A prompt of empty text beside chat-turn prompts (JSON lines: parquet holds one type
    a column)."""
    rows = [_verl_row(index) for index in range(3)]
    rows[1]["prompt"] = ""
    path = _write(tmp_path, ".jsonl", rows, {})
    with pytest.raises(MfsdpError) as error:
        _load(GRPO, path, [])
    assert str(error.value) == f"{path}:2: prompt is empty text ('')"
