"""Top-level keys of a training checkpoint and the wrapper prefixes that hide HF names.

DCP flattens the saved state dict, so a model weight is stored as
`model.<module path>` and its Adam moments as `optimizer.state.<module path>.exp_avg`.
verl and Megatron name the model entry `model0`, `model1`, ... when a model is built in
several virtual-pipeline chunks. Wrappers insert path segments of their own (`module.`
for Megatron-FSDP and DDP, `_orig_mod.` for torch.compile, `_fsdp_wrapped_module.` /
`_checkpoint_wrapped_module.` for FSDP1 and activation checkpointing); `hf_name` removes
them to recover the name `transformers` uses. Transformer Engine stores a
`<module>._extra_state` entry per layer (fp8 scaling bookkeeping): module state, not a
weight, never optimized.
"""

from __future__ import annotations

import re

MODEL_KEY_PREFIX = "model."
OPTIMIZER_STATE_PREFIX = "optimizer.state."
EXTRA_KEY_PREFIX = "extra."
WRAPPER_SEGMENTS = ("module", "_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")
# The tensors an optimizer keeps per parameter, shaped like it: Adam's moments, SGD's
# momentum (Megatron-FSDP runs Megatron-LM's `--optimizer adam` or `sgd`, whose
# torch.optim.SGD keeps `momentum_buffer`). Which set a checkpoint holds names its optimizer.
OPTIMIZER_MOMENTS = (("exp_avg", "exp_avg_sq"), ("momentum_buffer",))
NOT_WEIGHT_SUFFIXES = ("._extra_state",)  # Transformer Engine's fp8 bookkeeping

_MODEL_ENTRY_RE = re.compile(r"^(model[0-9]*)\.")  # `model.`, or `model0.`, `model1.` (chunks)


def hf_name(module_path: str) -> str:
    """`module.model.layers.0._orig_mod.mlp.up_proj.weight` ->
    `model.layers.0.mlp.up_proj.weight`."""
    return ".".join(part for part in module_path.split(".") if part not in WRAPPER_SEGMENTS)


def model_entry(key: str) -> str | None:
    """The top-level model entry a stored key lies under (`model`, `model0`, ...), or None."""
    match = _MODEL_ENTRY_RE.match(key)
    return match.group(1) if match else None


def is_weight_key(key: str) -> bool:
    """A key under a model entry that holds a weight (not TE's `_extra_state`)."""
    return model_entry(key) is not None and not key.endswith(NOT_WEIGHT_SUFFIXES)


def model_keys(keys: list[str]) -> list[str]:
    """The stored keys that are model weights (under the top-level `model.` entry, or one
    virtual-pipeline chunk's `model0.`), TE's `_extra_state` left out."""
    return [key for key in keys if is_weight_key(key)]


def module_path(model_key: str) -> str:
    """`model.module.decoder.layers.0.mlp.linear_fc1.weight_w` (or under `model0.`) ->
    `decoder.layers.0.mlp.linear_fc1.weight_w`: the entry and wrapper segments removed."""
    return hf_name(model_key.split(".", 1)[1])
