"""A resume onto training rows edited or reordered with their count unchanged, or with
`data.shuffle` flipped, says so in one warning line (was: silent; the steps after the
checkpoint read other rows than an uninterrupted run would). Fixing data is legitimate, so
it is a warning, not a refusal; checkpoints saved before the digest resume as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer import runner
from trainer.resume import PROMPTS_DIGEST, ROWS_DIGEST, SHUFFLE, rows_digest
from trainer.sft import run_sft

SETTINGS = (
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "trainer.total_steps=3",
)


def _reverse_rows(path: Path) -> None:
    lines = path.read_text().splitlines()
    path.write_text("\n".join(reversed(lines)) + "\n")


def _warning(run: Path, data: Path) -> str:
    return (
        f"[sft] warning: {run}/global_step_2: data.train_files ({data}) hold other rows, or"
        " rows in another order, than the checkpoint was trained on, or rows that tokenize to"
        " other trained tokens (another chat template or tokenizer, or prompt/response"
        " rows trained before mfsdp tokenized them as verl's SFTDataset does): the steps after"
        " 2 read other rows than an uninterrupted run would (a new trainer.run_dir starts"
        " over)\n"
    )


@pytest.fixture
def saved(tmp_path) -> tuple[Path, Path]:
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.stop_at_step=2"))
    return data, run


def test_rows_reordered_with_the_same_count_are_warned_about_once(saved, capsys):
    data, run = saved
    _reverse_rows(data)
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS))
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and _warning(run, data) in err, err


def test_the_same_rows_resume_without_a_warning(saved, capsys):
    data, run = saved
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS))
    assert "warning:" not in capsys.readouterr().err


def test_another_shuffle_into_a_new_run_dir_is_warned_about(saved, tmp_path, capsys):
    data, run = saved
    capsys.readouterr()
    other = tmp_path / "other"
    resume = f"checkpoint.resume={run}/global_step_2"
    run_sft(tiny_config(data, other, *SETTINGS, "data.shuffle=false", resume))
    assert (
        f"[sft] warning: {run}/global_step_2: data.shuffle=false but the checkpoint was trained"
        " with data.shuffle=true: the steps after 2 read other rows than an uninterrupted run"
        " would (a new trainer.run_dir starts over)\n"
    ) in capsys.readouterr().err


def test_a_checkpoint_without_the_digest_resumes_saying_it_cannot_compare(
    tmp_path, monkeypatch, capsys
):
    """Saved before the digests were recorded, its trained tokens may differ from this run's
    (the loss mask changed since): one line says so, and the run goes on."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    new_progress = runner.new_progress

    def older(*args: object) -> dict:
        progress = new_progress(*args)  # type: ignore[arg-type]
        return {
            k: v for k, v in progress.items() if k not in (ROWS_DIGEST, SHUFFLE, PROMPTS_DIGEST)
        }

    with monkeypatch.context() as patched:
        patched.setattr(runner, "new_progress", older)
        run_sft(tiny_config(data, run, *SETTINGS, "trainer.stop_at_step=2"))
    _reverse_rows(data)
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS))
    err = capsys.readouterr().err
    assert err.count("warning:") == 1, err
    assert "global_step_2: saved before mfsdp recorded the digest of the tokens a step" in err
    assert "the tokens it trained cannot be compared with this run's" in err
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 3


def test_the_digest_is_of_the_rows_in_order():
    rows = [([1, 2], [0, 1]), ([3], [1])]
    assert rows_digest(rows) == rows_digest(list(rows))
    assert rows_digest(rows) != rows_digest(rows[::-1])
    assert rows_digest([([1], [2])]) != rows_digest([([1, 2], [])])
    assert 0 <= rows_digest(rows) < 2**63


def test_the_sft_digest_reads_the_trained_tokens_not_the_templated_prompt():
    """A chat template that prints the date (Llama 3's system header) tokenizes the same
    rows differently on another day: the digest of every such resume differed, and it
    warned that the rows had changed."""
    from trainer.data.chat import Example
    from trainer.sft import _trained_tokens

    def row(prompt: list[int], response: list[int]) -> Example:
        return Example(
            input_ids=prompt + response, loss_mask=[0] * len(prompt) + [1] * len(response)
        )

    today = [row([1, 2, 3], [7, 8]), row([1, 2, 4], [9])]
    tomorrow = [row([1, 5, 3], [7, 8]), row([1, 5, 4], [9])]
    assert rows_digest(map(_trained_tokens, today)) == rows_digest(map(_trained_tokens, tomorrow))
    assert rows_digest(map(_trained_tokens, today)) != rows_digest(
        map(_trained_tokens, today[::-1])
    )
