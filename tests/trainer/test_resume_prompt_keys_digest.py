"""A checkpoint saved before a prompt turn's other keys reached the template resumes an
unchanged file without a warning.

Its prompts digest is of the role and content text of each row's non-assistant turns. The
digest then became one JSON text of a row's turns wherever a turn had another key (`id`,
`meta`), so resuming such a checkpoint on the same file warned "hold other prompts". The
prompts digest keeps the old form; the other keys have a digest of their own, compared
only where the checkpoint records it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer import runner
from trainer.config import DataConfig
from trainer.data.sft_dataset import load_sft_splits
from trainer.resume import (
    PROMPT_KEYS_DIGEST,
    PROMPTS_DIGEST,
    data_change_warning,
    new_progress,
    rows_digest,
)
from trainer.sft import SFT_RUN, run_sft
from trainer.tiny import build_tokenizer

SETTINGS = (
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "trainer.total_steps=3",
)


def _add_keys(path: Path, name: str = "ann") -> None:
    """`id`, `meta` and `name` on every user turn, which the tiny template ignores."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for index, row in enumerate(rows):
        for turn in row["messages"]:
            if turn["role"] == "user":
                turn.update(id=index, meta=[[1, 2], [3]], name=name)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _digest_before_turn_keys(path: Path) -> int:
    """The prompts digest as mfsdp recorded it before a turn's other keys reached the
    template: per row (the file's rows in order, no validation split), the role then
    content of each non-assistant turn, through `rows_digest`."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return rows_digest(
        tuple(
            text
            for turn in row["messages"]
            if turn["role"] != "assistant"
            for text in (turn["role"], turn["content"])
        )
        for row in rows
    )


def test_an_older_checkpoint_resumes_an_unchanged_file_with_other_turn_keys_quietly(
    tmp_path, monkeypatch, capsys
):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    _add_keys(data)
    run = tmp_path / "run"
    new = runner.new_progress

    def as_saved_before(*args: object) -> dict:  # the older release's record of the same rows
        progress = new(*args)  # type: ignore[arg-type]
        progress.pop(PROMPT_KEYS_DIGEST, None)
        return {**progress, PROMPTS_DIGEST: _digest_before_turn_keys(data)}

    with monkeypatch.context() as patched:
        patched.setattr(runner, "new_progress", as_saved_before)
        run_sft(tiny_config(data, run, *SETTINGS, "trainer.stop_at_step=2"))
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS))
    assert "warning:" not in capsys.readouterr().err
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 3


def _progress(path: Path, tokenizer: object, *, keys: bool) -> dict:
    """The record a run on `path` makes of its rows' prompts (and their other keys)."""
    train, _ = load_sft_splits(DataConfig(train_files=[str(path)]), tokenizer, 0, False)
    keys_digest = rows_digest(row.prompt_keys for row in train) if keys else None
    return new_progress(
        8, len(train), 0, 0, True, rows_digest(row.prompt for row in train), keys_digest
    )


def test_an_edited_turn_key_is_an_edited_prompt_where_the_checkpoint_records_the_keys(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=4)
    _add_keys(data, name="ann")
    tokenizer = build_tokenizer()
    saved, saved_before = (_progress(data, tokenizer, keys=keys) for keys in (True, False))
    _add_keys(data, name="bob")
    now = _progress(data, tokenizer, keys=True)
    warned = data_change_warning(SFT_RUN, now, saved, tmp_path / "step", [str(data)])
    assert warned is not None and "hold other prompts" in warned
    assert data_change_warning(SFT_RUN, now, saved_before, tmp_path / "step", [str(data)]) is None
    assert saved[PROMPTS_DIGEST] == now[PROMPTS_DIGEST] == _digest_before_turn_keys(data)
