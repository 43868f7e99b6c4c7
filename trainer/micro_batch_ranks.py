"""A resume on another number of ranks, said where the loss weighs each micro-batch alone.

Each rank takes every world-size-th row of a global batch (`batching.rank_share`) and forms
its micro-batches from its own rows, so which rows share a micro-batch follows the number of
ranks. Under `loss_normalization: micro_batch` (SFT's `data.`, GRPO's `actor.`, verl's
legacy trainers) each micro-batch is its own token mean, so that grouping sets how much each
token weighs: the same step trains another loss on another world size (`global` trains the
same on any, and so do micro-batches of one row each). The rows per step stay the same; the
run's config does not record the rank count, each step's manifest does (`world_size`). GRPO
samples otherwise on any normalization: each rank's sampling seed follows its rank and the
prompts fall to other ranks, so the resumed steps draw other rollouts (docs/grpo.md).
"""

from __future__ import annotations

from typing import Any

from mfsdp_ckpt.format.layout import CheckpointPaths
from trainer.resume import manifest_of

_MICRO_BATCH = "micro_batch"


def _normalization(cfg: Any) -> tuple[str, str] | None:
    """The run's loss normalization key and value: SFT's `data.loss_normalization`, GRPO's
    `actor.loss_normalization`; None for a config of neither."""
    for section in ("data", "actor"):
        value = getattr(getattr(cfg, section, None), "loss_normalization", None)
        if value is not None:
            return f"{section}.loss_normalization", value
    return None


def _one_row_each(cfg: Any, key: str) -> bool:
    """Whether each micro-batch holds one row on any number of ranks: SFT's padded
    micro-batches of `data.micro_batch_size: 1`, GRPO's `actor.ppo_micro_batch_size_per_gpu:
    1`. Each row is then its own loss, whichever rank takes it, and the step's loss their
    mean: the rank count cannot change how tokens weigh (a packed micro-batch holds as many
    rows as its token budget takes)."""
    if key == "data.loss_normalization":
        return bool(not cfg.data.packing and cfg.data.micro_batch_size == 1)
    return bool(cfg.actor.ppo_micro_batch_size_per_gpu == 1)


def rank_change_warning(found: CheckpointPaths, cfg: Any, world_size: int) -> str | None:
    """One line when a run resumes the checkpoint `found` on another number of ranks
    (`world_size`) than its manifest records, and that changes what it trains: a loss
    weighing micro-batches alone (of more than one row each: `_one_row_each`), or GRPO's
    rollouts; None where the counts agree, the step records none, or an SFT loss is
    `global` or weighs each row alone."""
    normalization = _normalization(cfg)
    micro_batch = (
        normalization is not None
        and normalization[1] == _MICRO_BATCH
        and not _one_row_each(cfg, normalization[0])
    )
    samples = hasattr(cfg, "rollout")  # GRPO: each rank draws its own rollouts
    if not (micro_batch or samples):
        return None
    manifest = manifest_of(found)
    if manifest is None or manifest.world_size == world_size:
        return None
    changes = []
    if micro_batch:
        assert normalization is not None
        changes.append(
            f"with {normalization[0]}={_MICRO_BATCH} each rank's rows form other"
            " micro-batches, each its own token mean, so the resumed steps weigh tokens"
            " otherwise than an uninterrupted run would (the same rows per step)"
        )
    if samples:
        changes.append(
            "each rank's sampling seed follows its rank and the prompts fall to other ranks,"
            " so the resumed steps sample other rollouts than an uninterrupted run would"
        )
    return (
        f"warning: {found.manifest}: step {manifest.step} was trained on {manifest.world_size}"
        f" rank(s), this run has {world_size}: {'; and '.join(changes)};"
        f" resumed on {manifest.world_size} rank(s) (--nproc-per-node x --nnodes), they train"
        " as before"
    )
