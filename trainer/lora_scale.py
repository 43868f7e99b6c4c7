"""The largest scale a LoRA adapter's B @ A may take, checked without torch.

`model.lora_alpha` over `model.lora_rank` is plain config arithmetic, so the bound is checked
where the config is (`trainer.config.check_lora_fields`: `mfsdp config check` and train before
it loads torch refuse it with the same line), and again on an adapter dir's own fields as
LoRA is built (`trainer.lora.apply_lora`).
"""

from __future__ import annotations

import math
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.format.lora_fields import LoraSettings
from trainer.config_base import ConfigError

# The largest scale an adapter's B @ A may take (alpha / r; alpha / sqrt(r) with rslora). LoRA
# recipes scale by about 1 (PEFT's default 8 / 8, verl's examples 2, rsLoRA a few); past this
# every update of B moves the model that many times the optimizer's step, and alpha 1e300 ran
# to "step 1: gradient norm is nan", blaming the step and not the alpha.
MAX_LORA_SCALE = 1e4


def refuse_overflowing_scale(settings: dict[str, Any], key: str) -> None:
    """ConfigError naming `key` (the alpha's key or adapter_config.json field) when the
    scale `settings` (LoraConfig fields: r, lora_alpha, use_rslora) give B @ A is not finite
    or past MAX_LORA_SCALE."""
    rank, alpha, rslora = settings["r"], settings["lora_alpha"], settings.get("use_rslora", False)
    scale = LoraSettings(rank, float(alpha), bool(rslora)).scale
    if math.isfinite(scale) and scale <= MAX_LORA_SCALE:
        return
    over = f"sqrt(r) (r={rank}, use_rslora)" if rslora else f"the rank {rank}"
    raise ConfigError(
        f"{key}: {cut_to(repr(alpha), 40)} over {over} scales the adapter by {scale:.6g}, past the"
        f" {MAX_LORA_SCALE:g} a LoRA run takes (PEFT's default scale is 1); give an alpha"
        f" of at most {MAX_LORA_SCALE:g} times that"
    )
