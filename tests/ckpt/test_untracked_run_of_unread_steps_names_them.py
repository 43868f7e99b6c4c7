"""A run dir of several step dirs and no tracker whose steps are all in a format mfsdp does
not read (verl's FSDP backend): `ckpt inspect RUN` offered the steps to choose from ("give
one of them (global_step_4, global_step_6)"), and the one chosen was refused next. It now
says that refusal at once, for the newest step: what it is and the verl.model_merger
command that converts it, as the same run with its tracker does. A run whose newest step
mfsdp reads still offers the choice."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp


def _verl_fsdp_step(run: Path, step: int) -> None:
    actor = run / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for rank in range(2):
        torch.save({}, actor / f"model_world_size_2_rank_{rank}.pt")


@pytest.mark.parametrize("command", ["inspect", "validate"])
def test_steps_none_of_which_is_read_are_refused_at_once(tmp_path, command):
    run = tmp_path / "run"
    for step in (4, 6):
        _verl_fsdp_step(run, step)
    code, _stdout, err = run_cli("ckpt", command, run)
    assert code == 2
    one_error(
        err,
        f"{run}: 2 step dirs and no latest_checkpointed_iteration.txt, none in a format mfsdp"
        f" reads; the newest: {run}/global_step_6/actor: a verl FSDP checkpoint",
        f"python -m verl.model_merger merge --backend fsdp --local_dir {run}/global_step_6/actor",
    )
    assert "give one of them" not in err


def test_a_run_whose_newest_step_is_read_still_offers_the_choice(tmp_path):
    run = tmp_path / "run"
    _verl_fsdp_step(run, 4)
    save_dcp({"model.norm.weight": torch.zeros(4)}, run / "global_step_6" / "dist_ckpt")
    code, _stdout, err = run_cli("ckpt", "inspect", run)
    assert code == 2
    one_error(err, "2 step dirs and no latest_checkpointed_iteration.txt; give one of them")
