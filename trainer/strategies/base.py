"""What the training loop needs from a sharding strategy, and nothing more.

The loop is the same for every strategy: wrap the model, build the optimizer on the
sharded parameters, run micro-batches, `before_optimizer_step` (finish gradient
reduction), clip, step. Gradients are averaged over data-parallel ranks by both
FSDP2 and Megatron-FSDP, so the loop scales each rank's loss by the world size
(`loss_sum / global_tokens * world_size`) to get the global token mean.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful

from trainer.config import OptimConfig, StrategyConfig
from trainer.distributed import DistEnv


class Strategy:
    name: str = "base"

    def __init__(self, cfg: StrategyConfig, env: DistEnv):
        self.cfg, self.env = cfg, env

    @property
    def compute_dtype(self) -> torch.dtype:
        choice = self.cfg.mixed_precision
        if choice == "auto":
            choice = "bf16" if self.env.device.type == "cuda" else "fp32"
        return torch.bfloat16 if choice == "bf16" else torch.float32

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        raise NotImplementedError

    def build_optimizer(self, model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
        raise NotImplementedError

    def trainable_params(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> list[torch.Tensor]:
        """The parameters whose (sharded) gradients the optimizer reads, for clipping."""
        return [p for group in optimizer.param_groups for p in group["params"]]

    def before_optimizer_step(self, model: torch.nn.Module) -> None:
        """Wait for gradient reduction and put reduced gradients where the optimizer reads them."""

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad(set_to_none=True)

    def model_state(self, model: torch.nn.Module) -> Stateful:
        raise NotImplementedError

    def optimizer_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Stateful:
        raise NotImplementedError

    def weights_state(self, model: torch.nn.Module) -> dict[str, Any]:
        """Every parameter, frozen ones too, sharded, under the model's own names: what the
        rollout engine is refreshed from (a LoRA model's `model_state` holds its adapter only)."""
        return self.model_state(model).state_dict()
