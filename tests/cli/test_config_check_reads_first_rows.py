"""`mfsdp config check` (and train's launcher, before torch) reads each data file's first row
as train reads its rows: a file train refuses at its first row (other columns, ShareGPT
`from`/`value` turns, messages written as a string; a GRPO file without its prompt column)
was said ok, and refused by train only after the model had loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.grpo import write_rl_rows
from tests.support.sft import write_chat_jsonl


def jsonl(path: Path, *rows: object) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def given(trainer: str, data: Path, run: Path) -> list[str]:
    """Overrides that check `data` as TRAINER's training file, lengths the tiny shape takes."""
    lengths = ["data.max_prompt_length=32", "rollout.max_response_length=16"]
    return [f"data.train_files=[{data}]", f"trainer.run_dir={run}"] + (
        lengths if trainer == "grpo" else []
    )


def refusal(trainer: str, data: Path, run: Path) -> str:
    """The one line `mfsdp config check TRAINER` refuses data file `data` with."""
    with pytest.raises(MfsdpError) as caught:
        check_config(trainer, None, given(trainer, data, run))
    said = str(caught.value)
    assert "\n" not in said and caught.value.exit_code == 2, said
    return said


def test_sft_rows_train_refuses_at_the_first_row_are_refused(tmp_path):
    sharegpt = {"messages": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    other = jsonl(tmp_path / "cols.jsonl", {"conversation": "x"})
    assert refusal("sft", other, tmp_path / "r").startswith(
        f"{other}:1: no 'messages' column and no 'prompt'/'response' columns (found: conversation)"
    )
    turns = jsonl(tmp_path / "turns.jsonl", sharegpt)
    assert refusal("sft", turns, tmp_path / "r") == (
        f"{turns}:1: 'messages': each chat turn needs 'role' and 'content', found"
        " {'from': 'human', 'value': 'hi'}"
    )
    text = jsonl(tmp_path / "text.jsonl", {"messages": "hi"})
    assert refusal("sft", text, tmp_path / "r").startswith(
        f"{text}:1: 'messages': chat turns must be a list of {{role, content}}, found str"
    )


def test_grpo_rows_without_the_prompt_column_are_refused(tmp_path):
    rows = jsonl(tmp_path / "rl.jsonl", {"question": "1+1?", "answer": "2"})
    assert refusal("grpo", rows, tmp_path / "r").startswith(
        f"{rows}:1: no 'prompt' column (found ['answer', 'question'])"
    )


@pytest.mark.parametrize("trainer", ["sft", "grpo"])
def test_good_rows_pass(tmp_path, trainer):
    data = (write_rl_rows if trainer == "grpo" else write_chat_jsonl)(tmp_path / "d.jsonl")
    check_config(trainer, None, given(trainer, data, tmp_path / "r"))


def test_a_grpo_val_file_train_may_not_read_is_left_to_train(tmp_path):
    """`data.val_max_samples` keeps the first N val rows across the val files: those of a
    second file may never be read, so its first row is not refused here (it was, where train
    ran its step)."""
    good = write_rl_rows(tmp_path / "good.jsonl")
    other = jsonl(tmp_path / "other.jsonl", {"question": "1+1?", "answer": "2"})
    checked = [*given("grpo", good, tmp_path / "r"), f"data.val_files=[{good},{other}]"]
    check_config("grpo", None, [*checked, "data.val_max_samples=2"])
    with pytest.raises(MfsdpError, match=f"^{other}:1: no 'prompt' column"):
        check_config("grpo", None, checked)


def test_a_parquet_whose_first_row_group_is_past_a_batch_is_left_to_train(tmp_path):
    """Train's reader decodes such a group whole to measure it before its first row (GBs for
    a large file of one group): that cost is train's alone, not the check's too."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainer.data.files import parquet_first_group_is_one_batch

    small, large = tmp_path / "small.parquet", tmp_path / "large.parquet"
    pq.write_table(pa.table({"conversation": ["x"] * 10}), small)
    pq.write_table(pa.table({"conversation": ["x"] * 20_000}), large, row_group_size=20_000)
    assert parquet_first_group_is_one_batch(small) and not parquet_first_group_is_one_batch(large)
    assert refusal("sft", small, tmp_path / "r").startswith(f"{small} row 1: no 'messages' column")
    check_config("sft", None, given("sft", large, tmp_path / "r"))
