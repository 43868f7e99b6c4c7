"""An SFT step written by an older mfsdp, resumed by this one with the same command.

Such a step was trained on another warmup (rounded up, not from lr 0: before 2026-12-03) or
another loss mask (no newline after each end of turn: before the change of 2026-12-05), and
the resume went on with this mfsdp's without a word, or with a warning that the data file
had changed when nobody had touched it, repeated at every later resume of the steps this run
trained.
Now:
- the lr of the step's last update, as its optimizer state records it, is compared with the
  lr this run's schedule gives it, in one line naming both and the likely causes, and no
  line on an ordinary same-command resume;
- the same prompts in the same order with other trained tokens are named as such (not as
  other rows), with the mask change as a cause;
- a step saved before any digest was recorded says its tokens cannot be compared;
- the steps this run saves record its own digests, so the warning comes once.
The older steps are made by this code with what the older version recorded in its place
(its lr schedule, its rows digest, no digest at all).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer import runner
from trainer.optim import lr_at
from trainer.resume import PROMPTS_DIGEST, ROWS_DIGEST, SHUFFLE
from trainer.sft import run_sft

SETTINGS = (
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "trainer.total_steps=4",
)


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "warning:" in line]


def _older_lr(cfg: Any, step: int, total: int) -> float:
    """The lr an mfsdp before 2026-12-03 gave update `step` of a schedule over `total` steps:
    warmup_ratio rounded up, and the first update already at lr / warmup."""
    optim = cfg.optim
    warm = math.ceil(optim.warmup_ratio * total)
    if step < warm:
        return optim.lr * (step + 1) / warm
    factor = 0.5 * (1.0 + math.cos(math.pi * (step - warm) / max(1, total - warm)))
    return optim.min_lr + (optim.lr - optim.min_lr) * factor


def _trains_on_the_older_schedule(run: runner.TrainingRun, step: int) -> float:
    return _older_lr(run.cfg, step, runner.lr_schedule_steps(run.cfg, run.total_steps))


@pytest.fixture
def data(tmp_path) -> Path:
    return write_chat_jsonl(tmp_path / "train.jsonl", rows=16)


def test_a_step_trained_on_the_older_warmup_is_said_in_one_line(
    data, tmp_path, monkeypatch, capsys
):
    run = tmp_path / "run"
    with monkeypatch.context() as older:
        older.setattr(runner.TrainingRun, "lr", _trains_on_the_older_schedule)
        run_sft(tiny_config(data, run, *SETTINGS, "trainer.stop_at_step=2"))
    capsys.readouterr()
    cfg = tiny_config(data, run, *SETTINGS)
    run_sft(cfg)
    err = capsys.readouterr().err
    old, new = _older_lr(cfg, 1, 4), lr_at(1, cfg.optim, 4)
    assert not math.isclose(old, new)
    assert _warnings(err) == [
        f"[sft] warning: {run}/global_step_2: step 2 was trained at lr {old:.6g}, where this"
        f" mfsdp's schedule, with the same settings, gives lr {new:.6g}: the step was written"
        " by an mfsdp with another schedule (before 2026-12-03, whose warmup was rounded up and"
        " did not start from 0), and the updates after step 2 follow this one's"
        " (docs/upgrading.md)"
    ], err


def test_a_same_command_resume_says_nothing_a_longer_schedule_only_its_setting(
    data, tmp_path, capsys
):
    """A setting changed on purpose is named by the settings line; the lr line, which
    claimed the schedule to come differed (not so for a constant one past its warmup), is
    for a schedule this mfsdp computes otherwise from the same settings."""
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.stop_at_step=2"))
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.stop_at_step=3"))
    assert _warnings(capsys.readouterr().err) == []
    longer = tiny_config(data, run, *SETTINGS, "trainer.total_steps=8")
    assert lr_at(2, longer.optim, 4) != lr_at(2, longer.optim, 8)
    run_sft(longer)
    err = capsys.readouterr().err
    assert "resumed with settings changed since step 3: trainer.total_steps 4 -> 8" in err
    assert _warnings(err) == [], err


def _recorded_as_the_older_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each save records the rows digest of another loss mask on the same prompts: the
    digest of the tokens an mfsdp before its mask change of 2026-12-05 trained."""
    new = runner.new_progress

    def older(*args: object) -> dict:
        progress = new(*args)  # type: ignore[arg-type]
        return {**progress, ROWS_DIGEST: progress[ROWS_DIGEST] ^ 1}

    monkeypatch.setattr(runner, "new_progress", older)


def test_the_same_prompts_with_other_trained_tokens_name_the_mask_once(
    data, tmp_path, monkeypatch, capsys
):
    run = tmp_path / "run"
    with monkeypatch.context() as older:
        _recorded_as_the_older_mask(older)
        run_sft(tiny_config(data, run, *SETTINGS, "trainer.stop_at_step=2"))
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.stop_at_step=3"))
    assert _warnings(capsys.readouterr().err) == [
        f"[sft] warning: {run}/global_step_2: data.train_files ({data}) hold the prompts the"
        " checkpoint was trained on, in its order, but their trained tokens differ: another"
        " tokenizer or chat template, edited responses, or a step written by an mfsdp before"
        " its loss-mask change of 2026-12-05, which did not train the newline after each"
        " assistant turn's end-of-turn token (this mfsdp masks as verl's MultiTurnSFTDataset),"
        " or prompt/response rows trained before mfsdp tokenized them as verl's SFTDataset"
        " does: the steps after 2"
        " train other tokens of the rows an uninterrupted run reads (a new trainer.run_dir"
        " starts over)"
    ]
    run_sft(tiny_config(data, run, *SETTINGS))  # step 3 is this run's own: said no more
    assert _warnings(capsys.readouterr().err) == []


def test_a_step_saved_before_the_digests_says_its_tokens_cannot_be_compared(
    data, tmp_path, monkeypatch, capsys
):
    run = tmp_path / "run"
    new = runner.new_progress

    def before_digests(*args: object) -> dict:
        progress = new(*args)  # type: ignore[arg-type]
        return {
            k: v for k, v in progress.items() if k not in (ROWS_DIGEST, SHUFFLE, PROMPTS_DIGEST)
        }

    with monkeypatch.context() as older:
        older.setattr(runner, "new_progress", before_digests)
        run_sft(tiny_config(data, run, *SETTINGS, "trainer.stop_at_step=2"))
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.stop_at_step=3"))
    assert _warnings(capsys.readouterr().err) == [
        f"[sft] warning: {run}/global_step_2: saved before mfsdp recorded the digest of the"
        " tokens a step trains (2026-12-03): the tokens it trained cannot be compared with"
        " this run's; mfsdp since then trains each assistant turn's end-of-turn token and the"
        " newline after it (verl's MultiTurnSFTDataset mask) and warms up as verl does"
        " (optim.warmup_ratio rounded down, from lr 0), so the steps after it may train other"
        " tokens at other learning rates than those before (a new trainer.run_dir starts"
        " over)"
    ]
    run_sft(tiny_config(data, run, *SETTINGS))
    assert _warnings(capsys.readouterr().err) == []
