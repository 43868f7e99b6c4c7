"""Fused kernels swapped into a built model: liger-kernel's RoPE, RMSNorm and SwiGLU (and, by
importing trainer.attention, the `varlen` attention implementation for packed rows).

These are three of the four kernels verl's `use_liger` turns on; the fourth, liger's fused
linear cross-entropy, is a loss mode (`model.loss=liger`, in `trainer.loss`) because our
model's forward ends in `linear_cross_entropy_sum`, not in the Hugging Face forward liger
patches. liger patches this model's own norm and MLP modules, and also replaces RoPE and the
norm and MLP classes in the family's transformers module, so every model of that family
built later in the process uses them too.
"""

from __future__ import annotations

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
    family = model.config.model_type
    if family not in _LIGER_APPLIERS:
        raise ConfigError(f"model.liger: no liger-kernel patch for family {family!r}")
    apply = getattr(monkey_patch, _LIGER_APPLIERS[family])
    apply(
        rope=True,
        rms_norm=True,
        swiglu=True,
        cross_entropy=False,
        fused_linear_cross_entropy=False,
        model=model,
    )


def import_liger(setting: str):
    """liger-kernel's monkey_patch module, or a one-line error naming the setting that needs it."""
    try:
        from liger_kernel.transformers import monkey_patch
    except ImportError as error:
        raise ConfigError(
            f"{setting} needs liger-kernel (pip install liger-kernel): {error}"
        ) from None
    return monkey_patch
