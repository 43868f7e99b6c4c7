"""GRPO's batch arithmetic: how `data.train_batch_size`, `actor.ppo_mini_batch_size`,
`rollout.n` and `actor.ppo_micro_batch_size_per_gpu` must divide each other over the ranks.

It depends on the config and the world size alone, so it is checked before torch loads
(`cli.launch.check_batch_sizes`): as the config loads, for one rank (what every world size
needs, see `check_grpo_batches`; `mfsdp config check grpo` stops there), and by `mfsdp train
grpo`'s launcher for the ranks it starts (`--nproc-per-node` x `--nnodes`). Each rank checks
it again with the world size it joined. This module imports no torch, so that the launcher
and the config check can call it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.config import ConfigError

if TYPE_CHECKING:
    from trainer.grpo.config import GRPOConfig


def check_grpo_batches(cfg: GRPOConfig, world_size: int = 1) -> None:
    """ConfigError (exit 2, one line naming the keys) when the batch sizes do not divide
    over `world_size` ranks. With one rank it is the part every world size needs: a
    mini-batch a rank cannot cut into micro-batches at `world_size=1` cannot be cut at any
    other (`w` ranks' shares are `1/w` of it). Each size is >= 1 by its field's range."""
    data, actor, n = cfg.data, cfg.actor, cfg.rollout.n
    if data.train_batch_size % actor.ppo_mini_batch_size:
        raise ConfigError(
            f"data.train_batch_size={data.train_batch_size} must be a multiple of "
            f"actor.ppo_mini_batch_size={actor.ppo_mini_batch_size}"
        )
    if actor.ppo_mini_batch_size % world_size:
        raise ConfigError(
            f"actor.ppo_mini_batch_size={actor.ppo_mini_batch_size} prompts must split evenly over "
            f"{world_size} ranks"
        )
    if (actor.ppo_mini_batch_size // world_size * n) % actor.ppo_micro_batch_size_per_gpu:
        raise ConfigError(
            f"a rank's mini-batch ({actor.ppo_mini_batch_size // world_size} prompts x "
            f"rollout.n={n}) must be a multiple of "
            f"actor.ppo_micro_batch_size_per_gpu={actor.ppo_micro_batch_size_per_gpu}"
        )
