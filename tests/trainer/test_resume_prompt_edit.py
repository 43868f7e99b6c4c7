"""A resume onto rows whose prompts were edited in place warns, as for other edited rows.

The rows digest covers what a row trains on (its response tokens): the prompt's tokens are
left out because a chat template may print today's date. So prompts edited with their
responses unchanged resumed without a word, though docs/sft.md promises a warning for
edited rows. The checkpoint now also records a digest of each row's prompt as the data
file holds it (role and content of its non-assistant turns, before any template);
checkpoints saved before it resume as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer import runner
from trainer.config import DataConfig
from trainer.data.sft_dataset import load_sft_splits
from trainer.sft import run_sft
from trainer.tiny import build_tokenizer

SETTINGS = (
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "trainer.total_steps=3",
)


def _edit_prompts(path: Path) -> None:
    """'Q: ' before every user turn; the responses stay as they were."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        for turn in row["messages"]:
            if turn["role"] == "user":
                turn["content"] = "Q: " + turn["content"]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _stop_at_2(tmp_path: Path) -> tuple[Path, Path]:
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.stop_at_step=2"))
    return data, run


def test_edited_prompts_are_warned_about_once(tmp_path, capsys):
    data, run = _stop_at_2(tmp_path)
    _edit_prompts(data)
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS))
    err = capsys.readouterr().err
    assert err.count("warning:") == 1, err
    assert (
        f"[sft] warning: {run}/global_step_2: data.train_files ({data}) hold other prompts than"
        " the checkpoint was trained on: the steps after 2 read other rows than an"
        " uninterrupted run would (a new trainer.run_dir starts over)\n"
    ) in err


def test_a_checkpoint_without_the_prompts_digest_resumes_as_before(tmp_path, monkeypatch, capsys):
    from trainer.resume import PROMPTS_DIGEST

    new_progress = runner.new_progress

    def older(*args: object) -> dict:  # as mfsdp wrote progress before the prompts digest
        progress = new_progress(*args)  # type: ignore[arg-type]
        return {k: v for k, v in progress.items() if k != PROMPTS_DIGEST}

    with monkeypatch.context() as patched:
        patched.setattr(runner, "new_progress", older)
        data, run = _stop_at_2(tmp_path)
    _edit_prompts(data)
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS))
    assert "warning:" not in capsys.readouterr().err
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 3


@pytest.mark.parametrize("columns", ["messages", "prompt-response"])
def test_the_prompt_is_the_text_in_the_file_whatever_the_template_prints(tmp_path, columns):
    """A template that prints the date tokenizes the same prompt differently on another day:
    the digest reads the turns as the file holds them (system and user, not the response)."""
    path = tmp_path / "rows.jsonl"
    if columns == "messages":
        turns = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2 + 2?"},
            {"role": "assistant", "content": "4"},
        ]
        row: dict = {"messages": turns}
        expected = ("system", "Be brief.", "user", "2 + 2?")
    else:
        row = {"prompt": "2 + 2?", "response": "4"}
        expected = ("user", "2 + 2?")
    path.write_text(json.dumps(row) + "\n")
    prompts = []
    for day in ("Monday", "Tuesday"):
        tokenizer = build_tokenizer()
        tokenizer.chat_template = f"Today is {day}.\n" + tokenizer.chat_template
        train, _ = load_sft_splits(DataConfig(train_files=[str(path)]), tokenizer, 0, False)
        prompts.append(train[0].prompt)
    assert prompts == [expected, expected]
