"""What a config's choices need installed or present, checked before anything starts.

`rollout.name=vllm` without vLLM, or `strategy.name=megatron_fsdp` without megatron-fsdp or
a GPU, failed in every rank after torch, transformers and the model had loaded (20 s, and a
traceback per rank for vLLM). The launching process checks here instead, without importing
torch or the packages themselves: `find_spec` says whether a package is installed (one that
is installed but broken still fails in the ranks, in one line), and the CUDA driver says
how many GPUs this process sees (CUDA_VISIBLE_DEVICES included), as torch would. A wandb
tracker needs a key wandb will find (`trainer.wandb_key`, read without importing wandb).
"""

from __future__ import annotations

import ctypes
import importlib.util
from typing import Any

from trainer.config import ConfigError
from trainer.model_source import check_tokenizer_present, resolve_model_source
from trainer.wandb_key import wandb_key_problem

VLLM_MISSING = (
    "rollout.name=vllm: vLLM is not installed in this environment (a GPU machine: pip install"
    " vllm; CPU: scripts/install_vllm_cpu.sh VENV, Python 3.11 only); or rollout.name=hf"
)
VLLM_BROKEN = (
    "rollout.name=vllm: vLLM is installed but fails to import (`python -c 'import vllm'`"
    " shows why); or rollout.name=hf"
)
MEGATRON_FSDP_MISSING = (
    "strategy.name=megatron_fsdp: the megatron-fsdp package is not installed"
    " (pip install -e '.[gpu]' on a GPU machine); or strategy.name=fsdp2"
)
MEGATRON_FSDP_NEEDS_CUDA = "strategy.name=megatron_fsdp needs CUDA; use strategy.name=fsdp2 on CPU"


def check_prerequisites(cfg: Any) -> None:
    """ConfigError (exit 2, one line) when the config asks for what this machine lacks, or
    its model dir lacks the tokenizer the run would load from it."""
    check_tokenizer_present(cfg.model, resolve_model_source(cfg.model))
    rollout = getattr(cfg, "rollout", None)
    if rollout is not None and rollout.name == "vllm" and not installed("vllm"):
        raise ConfigError(VLLM_MISSING)
    if "wandb" in cfg.trainer.logger:  # else every rank failed (or prompted) once built
        problem = wandb_key_problem()
        if problem is not None:
            raise ConfigError(problem)
    if cfg.strategy.name == "megatron_fsdp":
        if not installed("megatron_fsdp"):
            raise ConfigError(MEGATRON_FSDP_MISSING)
        if cfg.trainer.device == "cpu" or visible_cuda_devices() == 0:
            raise ConfigError(MEGATRON_FSDP_NEEDS_CUDA)


def installed(package: str) -> bool:
    """Whether `package` can be found for import (it is not imported: vLLM takes seconds)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a half-removed install
        return False


def visible_cuda_devices() -> int:
    """GPUs the CUDA driver shows this process; 0 without a driver (a CPU machine)."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value
