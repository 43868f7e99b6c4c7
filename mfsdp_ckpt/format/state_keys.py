"""Top-level keys of a training checkpoint and the wrapper prefixes that hide HF names.

DCP flattens the saved state dict, so a model weight is stored as
`model.<module path>` and its Adam moments as `optimizer.state.<module path>.exp_avg`.
Wrappers insert path segments of their own (`module.` for Megatron-FSDP and DDP,
`_orig_mod.` for torch.compile, `_fsdp_wrapped_module.` / `_checkpoint_wrapped_module.`
for FSDP1 and activation checkpointing); `hf_name` removes them to recover the name
`transformers` uses.
"""

from __future__ import annotations

MODEL_KEY_PREFIX = "model."
OPTIMIZER_STATE_PREFIX = "optimizer.state."
EXTRA_KEY_PREFIX = "extra."
WRAPPER_SEGMENTS = ("module", "_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")
ADAM_MOMENTS = ("exp_avg", "exp_avg_sq")


def hf_name(module_path: str) -> str:
    """`module.model.layers.0._orig_mod.mlp.up_proj.weight` ->
    `model.layers.0.mlp.up_proj.weight`."""
    return ".".join(part for part in module_path.split(".") if part not in WRAPPER_SEGMENTS)


def model_keys(keys: list[str]) -> list[str]:
    """The stored keys that are model weights (under the top-level `model.` entry)."""
    return [key for key in keys if key.startswith(MODEL_KEY_PREFIX)]
