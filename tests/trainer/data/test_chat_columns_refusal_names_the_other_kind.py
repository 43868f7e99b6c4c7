"""A row refused for lacking the kind of columns `data.chat_columns` reads says which kind the
setting reads, that the row holds the other, and the setting that trains it; the note of
rows holding both counts only rows whose cells hold values.

A row of prompt/response under `data.chat_columns=messages` was told "no 'messages' column
and no 'prompt'/'response' columns (found: prompt, response)", and advised to rename keys.
The `auto` note counted a parquet row whose prompt/response cells were null as holding
both, named it first, and advised `prompt_response`, which then refused that very row.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.config import SFTConfig, load_config
from trainer.data.sft_dataset import load_sft_splits
from trainer.tiny import build_tokenizer

CHAT = [{"role": "user", "content": "MSG-Q"}, {"role": "assistant", "content": "MSG-A"}]
# row 1 holds both kinds, row 2 prompt/response only, row 3 messages only
ROWS = [
    {"messages": CHAT, "prompt": "PR-Q", "response": "PR-A"},
    {"prompt": "PR-Q2", "response": "PR-A2"},
    {"messages": CHAT},
]
AUTO = "data.chat_columns=auto trains each row from what it has"


def _write(tmp_path: Path, suffix: str, rows: list[dict]) -> Path:
    """`rows` as a JSON-lines file (absent keys absent) or a parquet file (every row every
    column, absent ones null)."""
    path = tmp_path / f"rows{suffix}"
    if suffix == ".parquet":
        columns = list(dict.fromkeys(key for row in rows for key in row))
        pq.write_table(
            pa.Table.from_pylist([{k: row.get(k) for k in columns} for row in rows]), path
        )
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _load(path: Path, keys: list[str]) -> list[str]:
    """The text each row trains on, loaded as a run loads its rows."""
    cfg = load_config(SFTConfig, None, [f"data.train_files=[{path}]", "data.val_ratio=0", *keys])
    tokenizer = build_tokenizer()
    train, _ = load_sft_splits(cfg.data, tokenizer, 0, False)
    return [
        tokenizer.decode([token for token, mask in zip(e.input_ids, e.loss_mask) if mask])
        for e in train
    ]


def _refusal(path: Path, keys: list[str]) -> str:
    with pytest.raises(ValueError) as error:
        _load(path, keys)
    return str(error.value)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.parametrize(
    "setting, row, reads, holds",
    [
        ("messages", 2, "'messages'", "'prompt'/'response'"),
        ("prompt_response", 3, "'prompt'/'response'", "'messages'"),
    ],
)
def test_a_row_of_the_other_kind_is_told_so_and_auto_trains_it(
    tmp_path, suffix, setting, row, reads, holds
):
    path = _write(tmp_path, suffix, ROWS)
    said = _refusal(path, [f"data.chat_columns={setting}"])
    where = f"{path} row {row}" if suffix == ".parquet" else f"{path}:{row}"
    assert said.startswith(f"{where}: "), said
    assert f"data.chat_columns={setting} reads only {reads}" in said, said
    assert f"the row holds {holds}: {AUTO}" in said, said
    assert "found:" not in said and "data.prompt_key=COL" not in said, said
    assert "\n" not in said
    # the advice holds: each row trains from what it has
    assert [text.strip() for text in _load(path, ["data.chat_columns=auto"])] == [
        "MSG-A<|im_end|>",
        "PR-A2<|im_end|>",
        "MSG-A<|im_end|>",
    ]


@pytest.mark.parametrize(
    "given, picked_by",
    [
        ([], "data.chat_columns=prompt_response"),  # giving the keys sets it
        (["data.chat_columns=auto"], "data.prompt_key=question, data.response_key=answer"),
    ],
)
def test_named_keys_are_said_and_the_advice_reads_the_other_kind(tmp_path, given, picked_by):
    """Named prompt/response keys read them whatever the row holds: `auto` would not help,
    and the line gives the setting that does."""
    path = _write(tmp_path, ".jsonl", [{"messages": CHAT, "question": "Q"}])
    keys = ["data.prompt_key=question", "data.response_key=answer"]
    said = _refusal(path, [*keys, *given])
    assert (
        f"{path}:1: no 'answer' column beside 'question' ({picked_by} reads only"
        " 'question'/'answer'); the row holds 'messages': data.chat_columns=messages reads"
        " those in every row"
    ) in said, said
    assert [text.strip() for text in _load(path, [*keys, "data.chat_columns=messages"])] == [
        "MSG-A<|im_end|>"
    ]


def test_the_keys_hint_under_one_kind_names_the_setting_that_reads_them(tmp_path):
    """A question/answer row under `data.chat_columns=messages`: the keys that read it come
    with the setting, and following the line trains the row."""
    path = _write(tmp_path, ".jsonl", [{"question": "Q", "answer": "A"}])
    said = _refusal(path, ["data.chat_columns=messages"])
    hint = "data.prompt_key=question data.response_key=answer data.chat_columns=prompt_response"
    assert hint in said, said
    assert [text.strip() for text in _load(path, hint.split())] == ["A<|im_end|>"]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_note_counts_only_rows_whose_cells_hold_both(tmp_path, caplog, suffix):
    """Null cells hold nothing: only row 3 holds both, and the setting the note gives
    trains the row it names."""
    rows = [
        {"messages": CHAT, "prompt": None, "response": None},
        {"messages": None, "prompt": "PR-Q", "response": "PR-A"},
        {"messages": CHAT, "prompt": "PR-Q3", "response": "PR-A3"},
    ]
    path = _write(tmp_path, suffix, rows)
    with caplog.at_level(logging.WARNING, logger="mfsdp.data"):
        _load(path, [])
    notes = [r.getMessage() for r in caplog.records if "both a 'messages'" in r.getMessage()]
    where = f"{path} row 3" if suffix == ".parquet" else f"{path}:3"
    assert len(notes) == 1 and notes[0].startswith(f"note: {where}: both"), notes
    assert "more rows" not in notes[0]
    (tmp_path / "one").mkdir()
    one = _write(tmp_path / "one", suffix, [rows[2]])
    assert [t.strip() for t in _load(one, ["data.chat_columns=prompt_response"])] == [
        "PR-A3<|im_end|>"
    ]
