"""torch FSDP2 (`fully_shard`): one unit per decoder layer plus the root; runs on CPU/gloo too."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import init_device_mesh

from trainer.config import OptimConfig
from trainer.lora import AdapterState, hold_frozen_in_compute_dtype, is_lora_model
from trainer.model import decoder_layers
from trainer.optim import build_adamw, param_groups
from trainer.state import ModelState, OptimizerState
from trainer.strategies.base import Strategy


class FSDP2Strategy(Strategy):
    name = "fsdp2"

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(
            self.env.device.type, (self.env.world_size,), mesh_dim_names=("dp",)
        )
        policy = MixedPrecisionPolicy(param_dtype=self.compute_dtype, reduce_dtype=torch.float32)
        hold_frozen_in_compute_dtype(model, self.compute_dtype)  # LoRA: the base needs no fp32 copy
        for layer in decoder_layers(model):
            fully_shard(
                layer,
                mesh=mesh,
                mp_policy=policy,
                reshard_after_forward=self.cfg.reshard_after_forward,
            )
        fully_shard(
            model, mesh=mesh, mp_policy=policy, reshard_after_forward=self.cfg.reshard_after_forward
        )
        return model

    def build_optimizer(self, model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
        return build_adamw(
            param_groups(model.named_parameters(), cfg.weight_decay), cfg, self.env.device
        )

    def model_state(self, model: torch.nn.Module) -> Stateful:
        return AdapterState(model) if is_lora_model(model) else ModelState(model)

    def optimizer_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Stateful:
        return OptimizerState(model, optimizer)

    def weights_state(self, model: torch.nn.Module) -> dict[str, Any]:
        return ModelState(model).state_dict()  # the whole model, LoRA or not
