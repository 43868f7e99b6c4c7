"""verl's record of the model a Megatron actor or critic trained: `transformer_config.json`.

verl's Megatron checkpoint manager writes, beside the DCP (`dist_ckpt/` in its v1 layout,
`model/` in v2), `asdict()` of the TransformerConfig the run built its model with: Megatron-
Bridge's model provider (a TransformerConfig with the GPT build fields: rotary_base, vocab,
tying) or mbridge's TransformerConfig, with any
`actor_rollout_ref.actor.megatron.override_transformer_config.*` already applied. It is the
record of what the weights were trained to compute, as run_config.yaml is for a Bridge run,
and it is held to the export the same way (`megatron_record.recorded_settings`).

The file is JSON, so the objects in the dataclass are written as text: dtypes and enums as
their str() ("torch.bfloat16", "AttnBackend.auto"); callables are dropped by current verl
and were written as their repr by earlier versions ("<function silu at 0x7f..>"). Such text
says what it can (a dtype's name, a function's name) and nothing else: a repr is never
compared as a value, so it never refuses a checkpoint.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mfsdp_ckpt.convert.megatron_config import shown_value
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.unique_json import parse_json

VERL_TRANSFORMER_CONFIG = "transformer_config.json"  # Megatron's TransformerConfig, as JSON
MAX_TRANSFORMER_CONFIG_BYTES = 1 << 20  # a few KB in practice
ACTIVATION_KEY = "activation_func"
# An object written as its repr: "<function silu at 0x7f..>", "<AttnBackend.auto: 5>"
_REPR = re.compile(r"<.*>", re.DOTALL)
_FUNCTION_REPR = re.compile(r"<function ([A-Za-z_][\w.]*)(?: at 0x[0-9a-fA-F]+)?>")


@dataclass(frozen=True)
class VerlConfig:
    """transformer_config.json's fields as written, and the file (for error lines)."""

    fields: dict[str, Any]
    file: Path


def transformer_config_file(paths: layout.CheckpointPaths) -> Path | None:
    """verl's transformer_config.json beside `model/` (v2) or `dist_ckpt/` (v1): whatever is
    there under that name, as for Bridge's run_config.yaml (`CheckpointPaths.run_config`),
    so that the read follows a link inside the checkpoint and refuses, in one line naming
    the file, a link out of it, a FIFO or a directory (`safe_files`), instead of taking
    any of them for "no record"."""
    root = paths.root
    for folder in (paths.dist_ckpt.parent, paths.dist_ckpt.parent.parent):
        if folder != root and root not in folder.parents:
            continue
        file = folder / VERL_TRANSFORMER_CONFIG
        if os.path.lexists(file):
            return file
    return None


def read_transformer_config(paths: layout.CheckpointPaths) -> VerlConfig | None:
    """The checkpoint's transformer_config.json as data; None when it keeps none. Raises
    CheckpointFormatError / CheckpointFileError for one that cannot be read (not JSON, no
    JSON object, over the size cap, a duplicate key, no regular file, a link out of the
    checkpoint): a damaged record, exit 1, as a damaged run_config.yaml is."""
    file = transformer_config_file(paths)
    if file is None:
        return None
    text = safe_files.read_text(file, MAX_TRANSFORMER_CONFIG_BYTES, paths.root)
    data = parse_json(text, str(file), CheckpointFormatError)
    if not isinstance(data, dict):
        raise CheckpointFormatError(f"{file}: holds {shown_value(data)}, not a JSON object")
    return VerlConfig(data, file)


def known_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields as values: an object's repr left out (unknown, so never compared), the
    activation by its function's name (what Megatron-Bridge's records name it by)."""
    known = {
        key: value
        for key, value in fields.items()
        if not (isinstance(value, str) and _REPR.fullmatch(value))
    }
    activation = fields.get(ACTIVATION_KEY)
    named = _FUNCTION_REPR.fullmatch(activation) if isinstance(activation, str) else None
    if named is not None:
        known[ACTIVATION_KEY] = named.group(1)
    return known


__all__ = [
    "MAX_TRANSFORMER_CONFIG_BYTES",
    "VERL_TRANSFORMER_CONFIG",
    "VerlConfig",
    "known_fields",
    "read_transformer_config",
    "transformer_config_file",
]
