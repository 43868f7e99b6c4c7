"""`ckpt inspect`'s `contents` named the top-level groups of tensors alone: verl's
`lr_scheduler` and Megatron-LM's `opt_param_scheduler`, saved as non-tensor entries, were
left out though the table below listed them, and verl's dataloader state beside the step
(`data.pt`, SFT's `data_<rank>.pt`) went unsaid. A user reading `contents` to decide whether
a run resumes exactly saw a checkpoint without its scheduler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp

WEIGHT = "decoder.final_layernorm.weight"


def _state(scheduler: str) -> dict:
    return {
        "model": {WEIGHT: torch.ones(4)},
        "optimizer": {"state": {WEIGHT: {"exp_avg": torch.zeros(4)}}},
        scheduler: {"num_steps": 32, "max_lr": 1e-6},
    }


def _verl_rl(root: Path) -> tuple[Path, list[str]]:
    step = root / "run" / "global_step_4"
    save_dcp(_state("lr_scheduler"), step / "actor" / "dist_ckpt")
    torch.save({}, step / "data.pt")
    (root / "run" / "latest_checkpointed_iteration.txt").write_text("4")
    return root / "run", ["data.pt"]


def _verl_sft(root: Path) -> tuple[Path, list[str]]:
    step = root / "run" / "global_step_4"
    save_dcp(_state("lr_scheduler"), step / "dist_ckpt")
    (step / "huggingface").mkdir()
    for rank in range(2):
        torch.save({}, step / f"data_{rank}.pt")
    (step / "data.json").write_text("{}")  # no dataloader state of verl's
    (root / "run" / "latest_checkpointed_iteration.txt").write_text("4")
    return root / "run", ["data_0.pt", "data_1.pt"]


def _megatron_lm(root: Path) -> tuple[Path, list[str]]:
    save_dcp(_state("opt_param_scheduler"), root / "run" / "iter_0000004")
    torch.save({}, root / "run" / "iter_0000004" / "data.pt")  # not verl's: not named
    (root / "run" / "latest_checkpointed_iteration.txt").write_text("4")
    return root / "run", []


LAYOUTS = {
    "verl_rl": (_verl_rl, "lr_scheduler"),
    "verl_sft": (_verl_sft, "lr_scheduler"),
    "megatron_lm": (_megatron_lm, "opt_param_scheduler"),
}


@pytest.mark.parametrize("case", list(LAYOUTS))
def test_contents_names_the_scheduler_and_the_dataloader_state(tmp_path, case):
    build, scheduler = LAYOUTS[case]
    run, loader = build(tmp_path)
    code, out, err = run_cli("ckpt", "inspect", run, "--json")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["contents"] == sorted(["model", "optimizer", scheduler]), report["contents"]
    assert report["totals"]["by_group"] == {"model": 1, "optimizer": 1}  # tensors alone
    step = run / ("iter_0000004" if case == "megatron_lm" else "global_step_4")
    assert report["dataloader_state"] == [str(step / name) for name in loader]
    code, out, err = run_cli("ckpt", "inspect", run)
    assert code == 0, out + err
    assert f"contents    {', '.join(sorted(['model', 'optimizer', scheduler]))}\n" in out, out
    said = [line for line in out.splitlines() if line.startswith("dataloader")]
    line = f"dataloader  {', '.join(loader)} in {step}: verl's dataloader state, which mfsdp"
    expected = [f"{line} does not read"] if loader else []
    assert said == expected, out
