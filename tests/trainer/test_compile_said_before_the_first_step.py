"""`model.compile=true` is said as a run starts: the first steps compile each decoder layer,
which on CPU took minutes with no line between the run's first line and step 1."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from trainer.config import SFTConfig
from trainer.runner import TrainingRun


def _announced(capsys, compile_on: bool, device: str, start: int = 0) -> list[str]:
    cfg = SFTConfig()
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, compile=compile_on))
    run = SimpleNamespace(
        cfg=cfg,
        env=SimpleNamespace(is_main=True, device=torch.device(device)),
        name="sft",
        resume=None,
        start=start,
        stop=2,
        total_steps=2,
    )
    TrainingRun.announce(run, "fsdp2 on 1 x cpu")  # type: ignore[arg-type]
    return capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(("device", "cost"), [("cpu", "minutes on CPU"), ("meta", "a while")])
def test_compile_is_said_with_what_it_costs(capsys, device, cost):
    assert _announced(capsys, True, device) == [
        "[sft] fsdp2 on 1 x cpu, steps 0 -> 2",
        f"[sft] model.compile=true: compiling each decoder layer, the first steps take {cost}",
    ]


def test_nothing_is_said_without_compile_or_a_step_to_run(capsys):
    assert _announced(capsys, False, "cpu") == ["[sft] fsdp2 on 1 x cpu, steps 0 -> 2"]
    assert _announced(capsys, True, "cpu", start=2) == ["[sft] fsdp2 on 1 x cpu, steps 2 -> 2"]
