"""`mfsdp config from-verl` of a script whose `trainer.resume_from_path` is a verl step in a
format mfsdp does not read (verl's FSDP backend, Megatron's torch_dist under verl's Megatron
backend, the legacy fsdp_sft_trainer's shards in the step dir itself).

The resolution's refusal was taken for "nothing there": the conversion exited 0 with
`checkpoint.resume: <path>` and the note "no checkpoint is at that path on this machine ...
give model.path=<path> instead", though the checkpoint is there and model.path refuses it
too. Now the pair is not carried over (exit 1) in the line `mfsdp ckpt inspect` gives for
that path: what it is and the verl.model_merger command that converts it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.ckpt.test_unread_step_hf_dir_names_converter import (
    _verl_fsdp_step,
    _verl_torch_dist_step,
)
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from trainer.verl_import import convert_verl


def _legacy_sft_step(root: Path) -> Path:
    """verl's fsdp_sft_trainer: the per-rank shards in global_step_N/ itself."""
    step = root / "run" / "global_step_4"
    step.mkdir(parents=True)
    for rank in range(2):
        torch.save({}, step / f"model_world_size_2_rank_{rank}.pt")
    return step


STEPS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "verl_fsdp": (_verl_fsdp_step, "verl.trainer.main_ppo algorithm.adv_estimator=grpo"),
    "verl_torch_dist": (
        _verl_torch_dist_step,
        "verl.trainer.main_ppo algorithm.adv_estimator=grpo",
    ),
    "legacy_sft": (_legacy_sft_step, "verl.trainer.fsdp_sft_trainer"),
}


@pytest.mark.parametrize("case", list(STEPS))
def test_a_step_neither_key_reads_is_not_carried_over_in_inspects_line(tmp_path, case):
    build, command = STEPS[case]
    build(tmp_path)
    step = tmp_path / "run" / "global_step_4"
    code, _stdout, err = run_cli("ckpt", "inspect", step)
    assert code == 2
    inspected = one_error(err, "which mfsdp does not read").removeprefix("error: ")
    script = tmp_path / "run.sh"
    script.write_text(
        f"python3 -m {command} trainer.resume_mode=resume_path trainer.resume_from_path={step}\n"
    )
    conversion = convert_verl(script)
    resumed = [line for line in conversion.dropped if line.startswith("trainer.resume_mode=")]
    assert resumed == [
        f"trainer.resume_mode=resume_path, trainer.resume_from_path={step}: {inspected};"
        " then give model.path=OUT"
    ]
    assert "resume" not in (conversion.tree.get("checkpoint") or {})
    assert "path" not in (conversion.tree.get("model") or {})
