"""The resume warning about other training rows says that the rows may merely tokenize to
other trained tokens (another chat template or tokenizer) in SFT only, where the rows'
digest is of their trained tokens: a GRPO run's is of the rows' own values, and its warning
sent the user looking at a template that changes nothing there."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.grpo.runner import GRPO_RUN
from trainer.resume import data_change_warning, new_progress
from trainer.sft import SFT_RUN

TOKENIZING = ("tokenize to other trained tokens", "chat template")


def _warning(kind, tmp_path: Path) -> str:
    """The warning of a `kind` run resuming a checkpoint trained on other rows."""
    saved = {**new_progress(8, 16, 0, 1, True, 7), "step": 2}
    now = new_progress(8, 16, 0, 2, True, 8)  # other prompts too: not the same rows
    warned = data_change_warning(kind, now, saved, tmp_path / "global_step_2", ["train.jsonl"])
    assert warned is not None and "hold other rows, or rows in another order" in warned
    return warned


def test_a_grpo_resume_onto_other_rows_names_no_tokenizing(tmp_path):
    warned = _warning(GRPO_RUN, tmp_path)
    assert not any(words in warned for words in TOKENIZING), warned


@pytest.mark.parametrize("words", TOKENIZING)
def test_an_sft_resume_onto_other_rows_names_tokenizing(tmp_path, words):
    assert words in _warning(SFT_RUN, tmp_path)
