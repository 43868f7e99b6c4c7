"""verl's legacy `verl.trainer.fsdp_sft_trainer` spans its learning-rate warmup and decay over
steps per epoch x total_epochs (verl/trainer/fsdp_sft_trainer.py: `self.total_steps =
steps_per_epoch * total_epochs`) and uses trainer.total_training_steps only to stop; mfsdp
spans them over trainer.total_steps (`lr_schedule_steps`), as verl's main_ppo and sft_trainer
do. A converted fsdp_sft_trainer script that set total_training_steps trained with another
rate at every step, and its output said "as in verl". The conversion now says so, and how to
get verl's schedule."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sft import tiny_config
from trainer.runner import end_step, lr_schedule_steps, planned_steps
from trainer.verl_import import Conversion, convert_verl

ROWS, BATCH = 32, 8  # four steps an epoch
ARGS = "data.train_batch_size=8 trainer.total_training_steps=3 trainer.total_epochs=2\n"
SCHEDULE_NOTE = "trainer.total_steps=3: the learning-rate schedule (warmup, decay) differs"


def converted(tmp_path: Path, module: str) -> Conversion:
    script = tmp_path / "run.sh"
    script.write_text(f"torchrun -m {module} algorithm.adv_estimator=grpo {ARGS}")
    return convert_verl(script)


def test_the_legacy_sft_trainer_s_conversion_says_its_schedule_differs(tmp_path):
    conversion = converted(tmp_path, "verl.trainer.fsdp_sft_trainer")
    notes = [note for note in conversion.notes if note.startswith(SCHEDULE_NOTE)]
    assert len(notes) == 1
    assert (
        "verl.trainer.fsdp_sft_trainer spans it over steps per epoch x trainer.epochs" in notes[0]
    )
    assert notes[0].endswith("for verl's schedule write trainer.stop_at_step in its place")


@pytest.mark.parametrize("module", ["verl.trainer.sft_trainer", "verl.trainer.main_ppo"])
def test_trainers_that_size_the_schedule_by_the_steps_get_no_such_note(tmp_path, module):
    conversion = converted(tmp_path, module)
    assert not any(note.startswith(SCHEDULE_NOTE) for note in conversion.notes)
    assert any(note.startswith("trainer.steps_within_epochs=true") for note in conversion.notes)


def test_the_advice_gives_verls_schedule_and_stop():
    """stop_at_step in place of total_steps: the schedule spans 2 epochs of 4 steps, as
    verl's legacy trainer's does, and the run stops at step 3, as verl's does."""
    advice = ("trainer.total_steps=null", "trainer.epochs=2", "trainer.stop_at_step=3")
    cfg = tiny_config(Path("unused.jsonl"), Path("unused"), *advice)
    total = planned_steps(cfg, "data.global_batch_size", BATCH, ROWS, "rows")
    assert (lr_schedule_steps(cfg, total), end_step(total, cfg)) == (2 * ROWS // BATCH, 3)
