"""Whether a resumed run goes on with the learning-rate schedule its step was trained on.

The schedule is a pure function of the step and the config (`trainer.optim.lr_at`), so a
resume follows the schedule this run's config and this mfsdp compute, whatever computed the
lr of the steps before: a step written by an mfsdp before 2026-12-03 (warmup rounded up, not
starting from lr 0) went on with another lr from the resume step on, and said nothing. The
optimizer state a checkpoint holds records the lr of the step's last update (each param
group's `lr`, set before every update), so a resume compares it with the lr this run's
schedule gives that update, and says so in one line when they differ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful

from trainer.config import OptimConfig
from trainer.optim import lr_at

# The lr a checkpoint records went through a float32 where the optimizer keeps it as a tensor.
_REL_TOL = 1e-6


class TrainedLr:
    """A strategy's optimizer state (`Strategy.optimizer_state`) that also keeps the lr its
    param groups held when the loaded checkpoint was saved (`lrs`: none before a load, or
    where the state loaded holds no param groups). Read from the state as loaded, not from
    the optimizer after it: a strategy's load may keep only the Adam moments (Megatron-FSDP's
    does), leaving the lr the optimizer was built with."""

    def __init__(self, state: Stateful):
        self.state = state
        self.lrs: list[float] = []

    def state_dict(self) -> dict[str, Any]:
        return self.state.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.lrs = _group_lrs(state_dict)
        self.state.load_state_dict(state_dict)


def _group_lrs(state_dict: Mapping[str, Any]) -> list[float]:
    """Each param group's lr in an optimizer state dict (torch's layout: `param_groups`, a
    list of dicts), the ones that are no number left out."""
    groups = state_dict.get("param_groups")
    if not isinstance(groups, list):
        return []
    found = (group.get("lr") for group in groups if isinstance(group, Mapping))
    return [
        float(lr)
        for lr in found
        if isinstance(lr, int | float) or (isinstance(lr, torch.Tensor) and lr.numel() == 1)
    ]


def schedule_break_warning(
    where: object, step: int, trained: list[float], cfg: OptimConfig, schedule_steps: int
) -> str | None:
    """One line when the lr step `step` (1-based) of checkpoint `where` was trained at, as its
    optimizer state records it (`trained`), differs beyond float rounding from the lr this
    run's schedule (`cfg`, spanning `schedule_steps`) gives that update. None when they
    agree, or the state records no lr. Asked only where the run's settings are the ones
    the step was trained with (a changed setting is named by the config history's line, and
    whether the updates to come differ depends on the schedule): so the schedule that
    differs is the mfsdp's own."""
    if step < 1 or not trained:
        return None
    now = lr_at(step - 1, cfg, schedule_steps)
    then = next((lr for lr in trained if not math.isclose(lr, now, rel_tol=_REL_TOL)), None)
    if then is None:
        return None
    return (
        f"warning: {where}: step {step} was trained at lr {then:.6g}, where this mfsdp's"
        f" schedule, with the same settings, gives lr {now:.6g}: the step was written by an"
        " mfsdp with another schedule (before 2026-12-03, whose warmup was rounded up and did"
        f" not start from 0), and the updates after step {step} follow this one's"
        " (docs/upgrading.md)"
    )
