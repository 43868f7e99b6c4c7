"""Tokenized training rows are held as flat arrays, not a Python object per token.

`load_sft_splits` and `load_rl_prompts` kept a list of rows, each token id and mask flag a
Python int behind a pointer, each row a dataclass with tuples of strings: about 2.6 KB a
row for a 260-byte chat row (2.2 KB for a GSM8K prompt row), so a 10^6-row file took
gigabytes on every rank before the first step. A row now costs about what its tokens
(4 bytes, 1 more for a mask flag) and its prompt text hold; read back it is the row as it
was tokenized.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Callable, Sized
from types import SimpleNamespace

import pytest

from tests.support.sft import write_chat_jsonl
from trainer.config import DataConfig
from trainer.data.chat import Example
from trainer.data.row_table import IntLists, Pickled, RowTable, Shared, TextTuples
from trainer.data.sft_dataset import example_table, load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

SMALL, LARGE = 15, 60  # rows; each a tiny chat of about 60 tokens and 140 prompt bytes


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _held(build: Callable[[], Sized]) -> tuple[int, Sized]:
    """The bytes Python still holds once `build` returned (its result is kept)."""
    gc.collect()
    tracemalloc.start()
    try:
        built = build()
        gc.collect()
        return tracemalloc.get_traced_memory()[0], built
    finally:
        tracemalloc.stop()


def _own_bytes(rows, ids: str) -> float:
    """What a row's own data takes, on average: its tokens (an int32 id, a mask byte) and
    its prompt turns' UTF-8 text."""
    tokens = sum(len(getattr(row, ids)) for row in rows)
    text = sum(len(turn.encode()) for row in rows for turn in row.prompt)
    return (5 * tokens + text) / len(rows)


def _bytes_per_row(load: Callable[[int], Sized], ids: str) -> tuple[float, float]:
    """(bytes held per row more, between SMALL and LARGE rows loaded; the rows' own bytes)."""
    load(4)  # caches filled once (the chat template, the tokenizer's)
    small, _ = _held(lambda: load(SMALL))
    large, rows = _held(lambda: load(LARGE))
    return (large - small) / (LARGE - SMALL), _own_bytes(rows, ids)


def test_sft_examples_held_near_their_own_size(tmp_path, tokenizer):
    def load(count: int) -> Sized:
        path = write_chat_jsonl(tmp_path / f"chat{count}.jsonl", count)
        cfg = DataConfig(train_files=[str(path)], val_ratio=0.0)
        return load_sft_splits(cfg, tokenizer, 0, False)[0]

    per_row, own = _bytes_per_row(load, "input_ids")
    # a list of Examples: 2.6 KB a row, 6 times its own bytes
    assert per_row < 2 * own, (per_row, own)


def test_grpo_prompts_held_near_their_own_size(tmp_path, tokenizer):
    def load(count: int) -> Sized:
        path = tmp_path / f"rl{count}.jsonl"
        with open(path, "w") as handle:
            for index in range(count):
                turns = [{"role": "user", "content": f"Tom has {index} apples and buys 4 more."}]
                truth = {"style": "rule", "ground_truth": str(index + 4)}
                row = {"prompt": turns, "data_source": "openai/gsm8k", "reward_model": truth}
                row["extra_info"] = {"split": "train", "index": index}
                handle.write(json.dumps(row) + "\n")
        return load_rl_prompts([str(path)], RLDataConfig(), tokenizer)[0]

    per_row, own = _bytes_per_row(load, "prompt_ids")
    # a list of RLPrompts: 2.2 KB a row, 6 times its own bytes and its reward's
    assert per_row < 2 * own + 100, (per_row, own)


def test_rows_read_back_as_appended():
    examples = [
        Example([5, 70_000, 2**31 - 1], [0, 1, 1], ("user", "héllo \N{SNOWMAN}"), ("name\nx",)),
        Example([], [], (), (), unlike_verl="masked"),
        Example([1], [1], ("", "")),
    ]
    table = example_table()
    for example in examples:
        table.append(example)
    assert list(table) == examples and len(table) == 3
    assert table[-1] == examples[-1] and table[1:] == examples[1:]
    with pytest.raises(IndexError):
        table[3]


def test_any_value_read_back_equal_and_apart():
    values = [{"index": 1, "tags": ["a"]}, None, 72, 0.5, [1, "2"], "27"]
    table = RowTable(
        lambda value, source: (value, source), {"value": Pickled(), "source": Shared()}
    )
    rows = [SimpleNamespace(value=v, source=f"s{i % 2}") for i, v in enumerate(values)]
    for row in rows:
        table.append(row)
    assert [value for value, _ in table] == values
    assert [source for _, source in table] == ["s0", "s1"] * 3
    table[0][0]["tags"].append("b")  # a reward function's edit stays its own
    assert table[0][0] == values[0]


def test_columns_hold_empty_lists_and_texts():
    ints, texts = IntLists("i"), TextTuples()
    for values in ([], [3, 4], []):
        ints.append(values)
    for tup in ((), ("",), ("a", "", "b")):
        texts.append(tup)
    assert [ints[i] for i in range(3)] == [[], [3, 4], []]
    assert [texts[i] for i in range(3)] == [(), ("",), ("a", "", "b")]
