"""A run with `trainer.steps_within_epochs` ends at `trainer.total_steps` or at its last
epoch's end, whichever comes first; the launcher does not read the data, so only the first is
known to it. A Ctrl-C after such a run saved its `total_steps` checkpoint still says training
finished (nothing is left: it never trains past `total_steps`), not to resume it, and one at
an earlier checkpoint, perhaps an epoch's end, is told how to resume, which then says itself
whether anything is left."""

from __future__ import annotations

from pathlib import Path

import torch

from cli.run_report import interrupted_run
from mfsdp_ckpt.checkpointer import Checkpointer
from tests.support.paths import EXAMPLES
from trainer.config import SFTConfig, load_config


def _saved(run: Path, step: int) -> None:
    Checkpointer(run, strategy="none").save(
        step, {"model": {"w": torch.ones(2)}}, contents=("model",)
    )


def _config(run: Path, total_steps: int):
    overrides = [f"trainer.run_dir={run}", f"trainer.total_steps={total_steps}"]
    overrides.append("trainer.steps_within_epochs=true")
    return load_config(SFTConfig, str(EXAMPLES / "sft_tiny_cpu.yaml"), overrides)


def test_a_run_within_epochs_interrupted_at_its_total_steps_says_training_finished(tmp_path):
    run = tmp_path / "run"
    _saved(run, 6)
    assert interrupted_run(_config(run, 6), 0) == (
        f"interrupted after training finished (step 6 of 6); its final checkpoint is"
        f" {run / 'global_step_6'}"
    )


def test_a_run_within_epochs_interrupted_before_its_total_steps_is_told_to_resume(tmp_path):
    run = tmp_path / "run"
    _saved(run, 4)  # the last epoch's end, or a step before it: the data decides
    line = interrupted_run(_config(run, 6), 0)
    assert line.endswith(
        f"the newest checkpoint is {run / 'global_step_4'}: run the same"
        " command again to resume from it"
    ), line
