"""Every rank of a run resuming from another run's dir, which that run is still saving
into, loads the same step.

Was: each rank resolved `checkpoint.resume=<run dir>` to its newest step itself, at its own
moment; a save committing in between had rank 0 load step 100 and rank 1 step 200 into one
model. Rank 0 resolves it now and hands the step to the others (`_found_by_rank_0`).

The save commits right after rank 0's lookup, and rank 1 looks its own up only once it
did (the old order made deterministic), through the real resolution of a Megatron-LM run:
the step dir renamed into place, then the tracker updated.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mfsdp_ckpt.format import checkpoint_resolution, layout, run_steps
from tests.support.distributed import run_distributed
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.megatron_checkpoints import megatron_args, megatron_run
from tests.support.waiting import wait_until
from trainer.resume import resume_if_any
from trainer.sft import SFT_RUN


class Loaded(Exception):
    """What a rank was asked to load, as far as the test needs to look."""


class Resumer:
    """The checkpointer's resume side for rank `rank`: the real lookup, around which the
    other run commits step 200; `load` stops at the step asked for."""

    def __init__(self, rank: int, run_dir: Path, other: Path):
        self.rank, self.run_dir, self.other = rank, run_dir, other

    def find_resume(self, resume: str) -> layout.CheckpointPaths | None:
        if self.rank != 0:  # once the other run has moved on
            wait_until(
                lambda: run_steps.read_tracker_text(self.other) == "200",
                60,
                lambda: "step 200 was never committed",
            )
        found = checkpoint_resolution.checkpoint_to_resume(self.run_dir, resume)
        if self.rank == 0:  # the other run commits its next step
            staged = self.other / "iter_0000200.tmp"
            shutil.copytree(self.other / "iter_0000100", staged)
            staged.rename(self.other / "iter_0000200")
            (self.other / layout.TRACKER_FILE).write_text("200")
        return found

    def load(self, paths: layout.CheckpointPaths, states: dict) -> None:
        raise Loaded(paths.step)


def _resume(rank: int, world_size: int, other: str, root: str) -> None:
    resumer = Resumer(rank, Path(root) / f"run{rank}", Path(other))
    resumer.run_dir.mkdir()
    try:
        resume_if_any(resumer, other, {"extra": {}}, kind=SFT_RUN)
    except Loaded as loaded:
        (Path(root) / f"rank{rank}").write_text(str(loaded.args[0]))


def test_every_rank_loads_the_step_rank_0_found(tmp_path):
    model = tiny_causal_lm("qwen2", vocab=64)
    other = megatron_run(tmp_path / "other", model, megatron_args(model))
    run_distributed(_resume, 2, str(other), str(tmp_path))
    assert run_steps.read_tracker_text(other) == "200"
    loaded = [(tmp_path / f"rank{rank}").read_text() for rank in range(2)]
    assert loaded == ["100", "100"], loaded
