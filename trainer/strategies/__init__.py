"""Sharding strategies behind one interface (`base.Strategy`): `fsdp2` and `megatron_fsdp`."""

from __future__ import annotations

from trainer.config import StrategyConfig
from trainer.distributed import DistEnv
from trainer.strategies.base import Strategy


def make_strategy(cfg: StrategyConfig, env: DistEnv) -> Strategy:
    """`auto` picks Megatron-FSDP on CUDA when it is installed and there are >= 2 ranks, else
    FSDP2 (on one GPU both run; FSDP2 stays the default there, see docs/benchmarks.md)."""
    name = cfg.name
    if name == "auto":
        name = (
            "megatron_fsdp"
            if env.device.type == "cuda" and env.world_size > 1 and _has_megatron_fsdp()
            else "fsdp2"
        )
    if name == "fsdp2":
        from trainer.strategies.fsdp2 import FSDP2Strategy

        return FSDP2Strategy(cfg, env)
    from trainer.strategies.megatron_fsdp import MegatronFSDPStrategy

    return MegatronFSDPStrategy(cfg, env)


def _has_megatron_fsdp() -> bool:
    import importlib.util

    return importlib.util.find_spec("megatron_fsdp") is not None
