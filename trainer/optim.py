"""AdamW, the learning-rate schedule, and gradient clipping over sharded gradients.

The schedule is a pure function of the step (`lr_at`), applied to the param groups before
each update: nothing schedule-related needs saving, and resume cannot get it wrong.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import cast

import torch
import torch.distributed as dist

from mfsdp_ckpt.errors import MfsdpFailedError
from trainer.config import OptimConfig

NO_DECAY_GROUP, DECAY_GROUP = "no_decay", "decay"


def warmup_steps(cfg: OptimConfig, total_steps: int) -> int:
    """`optim.warmup_steps`, else `warmup_ratio` of the run's updates rounded down, as verl
    computes `lr_warmup_steps` from `lr_warmup_steps_ratio` (`int(ratio * total)`) in both
    its FSDP and Megatron backends."""
    if cfg.warmup_steps > 0:
        return cfg.warmup_steps
    return int(cfg.warmup_ratio * total_steps)


def lr_at(step: int, cfg: OptimConfig, total_steps: int) -> float:
    """Learning rate of update number `step` (0-based).

    Warmup rises linearly from 0 at the first update to `lr` at update `warmup` (`lr *
    step / warmup`); then cosine, linear or constant decay over the remaining updates toward
    `min_lr`. This is verl's schedule in both backends (its FSDP one's LambdaLR from step 0,
    Megatron-LM's OptimizerParamScheduler with `lr_warmup_init` 0), so a run converted from
    verl gets its learning rate at every step; the first update, at lr 0, still moves
    AdamW's moment estimates, as it does there. One case differs from verl's FSDP backend: a
    constant schedule with no warmup trains update 0 at `lr`, as verl's Megatron backend
    does, where the FSDP backend's `min(1, step / max(1, warmup))` gives it lr 0 (an update
    that moves no weight; docs/verl.md says so).
    """
    warm = warmup_steps(cfg, total_steps)
    if step < warm:
        return cfg.lr * step / warm
    if cfg.scheduler == "constant":
        return cfg.lr
    progress = min(1.0, (step - warm) / max(1, total_steps - warm))
    if cfg.scheduler == "cosine":
        factor = 0.5 * (1.0 + math.cos(math.pi * progress))
    elif cfg.scheduler == "linear":
        factor = 1.0 - progress
    else:
        raise ValueError(f"optim.scheduler: unknown {cfg.scheduler!r}")
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * factor


def warmup_past_the_end(
    cfg: OptimConfig, total_steps: int, schedule_steps: int | None = None
) -> str | None:
    """A warning when the warmup takes the whole run: the learning rate reaches `optim.lr`
    at update `warmup` (0-based), so a run of no more updates than that never trains at
    `optim.lr`, and a run of one update under warmup trains at lr 0. `schedule_steps`: the
    steps the schedule spans, where the run ends before them (`trainer.steps_within_epochs`);
    default `total_steps`. A warning, not a refusal: the run's steps are known only once the
    data is read (`trainer.epochs`), and a short test of a long run's config is a fair thing
    to want."""
    schedule = schedule_steps or total_steps
    warm = warmup_steps(cfg, schedule)
    if warm == 0 or warm < total_steps:
        return None
    named = (
        f"optim.warmup_steps={cfg.warmup_steps}"
        if cfg.warmup_steps > 0
        else f"optim.warmup_ratio={cfg.warmup_ratio:g} ({warm} steps)"
    )
    return (
        f"warning: {named} is not less than the run's {total_steps} steps: the learning"
        f" rate never reaches optim.lr={cfg.lr:g} (the last step's is"
        f" {lr_at(total_steps - 1, cfg, schedule):g})"
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def apply_settings(optimizer: torch.optim.Optimizer, cfg: OptimConfig) -> None:
    """The config's betas, eps and weight decay on every param group (no decay stays none).
    A resumed optimizer's groups come from the checkpoint, with the settings the run was
    started with: a changed optim.eps or optim.betas was silently ignored (the lr is set
    every step anyway)."""
    for group in optimizer.param_groups:
        group["betas"], group["eps"] = tuple(cfg.betas), cfg.eps
        if group.get("name") != NO_DECAY_GROUP:
            group["weight_decay"] = cfg.weight_decay


def param_groups(
    named_params: Iterable[tuple[str, torch.nn.Parameter]], weight_decay: float
) -> list[dict]:
    """Biases and norm weights (1-D tensors) get no weight decay, as in Megatron-LM and
    verl's Megatron backend, which the Megatron-FSDP recipe runs (verl's FSDP backend decays
    every parameter: docs/verl.md says so)."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, param in named_params:
        if not param.requires_grad:
            continue
        (no_decay if param.ndim <= 1 or name.endswith(".bias") else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay, "name": DECAY_GROUP}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0, "name": NO_DECAY_GROUP})
    return groups


def build_adamw(groups: list[dict], cfg: OptimConfig, device: torch.device) -> torch.optim.AdamW:
    """The AdamW every strategy builds over its `param_groups`: fused on CUDA unless
    `optim.fused` says otherwise, else torch's multi-tensor (foreach) kernels, never its
    per-parameter loop. `optim.lr` here is only the starting value: the schedule (`lr_at`)
    sets every group's lr before each update, warmup included."""
    fused = cfg.fused if cfg.fused is not None else device.type == "cuda"
    return torch.optim.AdamW(
        groups,
        lr=cfg.lr,
        betas=cast(tuple[float, float], tuple(cfg.betas)),  # two numbers (config's Betas)
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        fused=fused or None,
        foreach=None if fused else True,
    )


def local_grad(param: torch.Tensor) -> torch.Tensor | None:
    """The part of `param`'s gradient this rank holds, None when it has none. Under FSDP a
    gradient is a DTensor sharded across ranks, and `to_local()` is this rank's shard:
    `clip_grad_norm` sums the squares of these plain shards and all-reduces them once, and
    scales each shard in place. A gradient in one process is a plain tensor already."""
    grad = param.grad
    if grad is None:
        return None
    return grad.to_local() if hasattr(grad, "to_local") else grad


class NonFiniteGradientError(MfsdpFailedError, FloatingPointError):
    """The gradient norm is NaN or Inf: the run stops before the update spoils the weights."""


def clip_grad_norm(
    params: Iterable[torch.Tensor],
    max_norm: float,
    device: torch.device,
    group: dist.ProcessGroup | None = None,
) -> float:
    """Global L2 norm of gradients sharded over `group` (each rank holds disjoint shards); clip in
    place.

    Summing squared local norms and reducing once is exact for any sharding, even or
    uneven, because every element lives on exactly one rank (data-parallel sharding, tp=1).
    Returns the norm before clipping; `max_norm <= 0` only measures.
    """
    grads = [g for g in (local_grad(p) for p in params) if g is not None and g.numel()]
    squares = torch.zeros((), dtype=torch.float32, device=device)
    for grad in grads:
        squares += torch.linalg.vector_norm(grad, 2, dtype=torch.float32).pow(2)
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        dist.all_reduce(squares, group=group)
    norm = squares.sqrt()
    if max_norm > 0 and grads:
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        torch._foreach_mul_(grads, coef)
    return float(norm.item())
