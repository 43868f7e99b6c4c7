"""Fused kernels swapped into a built model: liger-kernel's RoPE, RMSNorm and SwiGLU (and, by
importing trainer.attention, the `varlen` attention implementation for packed rows).

These are three of the four kernels verl's `use_liger` turns on; the fourth, liger's fused
linear cross-entropy, is a loss mode (`model.loss=liger`, in `trainer.loss`) because our
model's forward ends in `linear_cross_entropy_sum`, not in the Hugging Face forward liger
patches. liger patches this model's own norm and MLP modules, and also replaces RoPE and the
norm and MLP classes in the family's transformers module, which would give every model of that
family built later in the process liger's Triton kernels, a CPU one too (a reference model, an
export's check), where they fail. `scope_to_model` undoes that module-wide part.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, cast

import torch

import trainer.attention  # noqa: F401  (registers attn_implementation=varlen with transformers)
from trainer.config import ConfigError, ModelConfig

_LIGER_APPLIERS = {
    "qwen2": "apply_liger_kernel_to_qwen2",
    "qwen3": "apply_liger_kernel_to_qwen3",
    "llama": "apply_liger_kernel_to_llama",
}


def apply_kernels(model: torch.nn.Module, cfg: ModelConfig) -> None:
    """Swap in the fused kernels `cfg` asks for (`model.liger`), before compile and sharding.
    Also checks, before any step runs, that `model.loss=liger` will find liger-kernel."""
    if cfg.loss == "liger":
        import_liger("model.loss=liger")
    if not cfg.liger:
        return
    monkey_patch = import_liger("model.liger=true")
    family: str = cast(Any, model.config).model_type  # torch types attributes as Tensor | Module
    if family not in _LIGER_APPLIERS:
        raise ConfigError(f"model.liger: no liger-kernel patch for family {family!r}")
    apply = getattr(monkey_patch, _LIGER_APPLIERS[family])
    family_module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    before = dict(vars(family_module))
    apply(
        rope=True,
        rms_norm=True,
        swiglu=True,
        cross_entropy=False,
        fused_linear_cross_entropy=False,
        model=model,
    )
    scope_to_model(family_module, before)


def scope_to_model(family_module: ModuleType, before: dict[str, Any]) -> None:
    """Undo the module-wide part of a liger patch of `family_module` (its globals `before`).
    The patched model's own norm and MLP modules carry liger's forward as bound methods, so
    the classes go back to transformers' own. RoPE is a module function the attention calls,
    so it stays liger's for CUDA tensors and falls back to transformers' for any other."""
    for name, value in list(vars(family_module).items()):
        original = before.get(name)
        if value is original:
            continue
        if name not in before:
            delattr(family_module, name)
        elif name == "apply_rotary_pos_emb":
            setattr(family_module, name, _by_device(value, before[name]))
        else:
            setattr(family_module, name, original)


def _by_device(cuda_rotary: Callable, other_rotary: Callable) -> Callable:
    """A rotary function that runs `cuda_rotary` on CUDA tensors and `other_rotary` on the rest;
    re-patching wraps transformers' function again, not the previous wrapper."""
    other_rotary = getattr(other_rotary, "transformers_rotary", other_rotary)

    def rotary(q: torch.Tensor, k: torch.Tensor, *args: Any, **kwargs: Any):
        return (cuda_rotary if q.is_cuda else other_rotary)(q, k, *args, **kwargs)

    rotary.transformers_rotary = other_rotary  # type: ignore[attr-defined]
    return rotary


def import_liger(setting: str) -> ModuleType:
    """liger-kernel's monkey_patch module, or a one-line error naming the setting that needs it
    and the `liger` extra, which installs the liger-kernel version mfsdp is tested with."""
    try:
        from liger_kernel.transformers import monkey_patch
    except ImportError as error:
        raise ConfigError(
            f"{setting} needs liger-kernel (pip install 'mfsdp[liger]'): {error}"
        ) from None
    return monkey_patch
