"""Per-rank safetensors shards of torch's `HuggingFaceStorageWriter`, left unconsolidated.

`dcp.save(..., storage_writer=HuggingFaceStorageWriter(path, save_distributed=True))` has
every rank write `shard-<rank>-model-<i>-of-<n>.safetensors`, each holding its part of every
tensor under the tensor's full name (where the part lies is in the file's
`DCP_SHARDING_INFO` metadata); with `enable_consolidation=True` they go to `sharded/` and are
merged into `model-<i>-of-<n>.safetensors` beside it. Left unmerged (consolidation off, or
a save that stopped before it), they are no Hugging Face model: read as one, each file's
half-rows pass for whole tensors. Recognised by their names, so that the error says what
they are and what makes them a model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

SHARD_FILE_RE = re.compile(r"shard-\d{5}-model-\d{5}-of-\d{5}\.safetensors")


def unconsolidated_shards(names: Iterable[str]) -> list[str]:
    """The names among `names` that are such per-rank shards, sorted."""
    return sorted(name for name in names if SHARD_FILE_RE.fullmatch(name))


def message(directory: Path, shards: list[str]) -> str:
    """What `directory` holds and how to make a model of it, in one line."""
    return (
        f"{directory}: {len(shards)} per-rank shard(s) of torch's HuggingFaceStorageWriter"
        f" (e.g. {shards[0]}), not consolidated: each holds part of every tensor; merge them"
        " with torch.distributed.checkpoint._consolidate_hf_safetensors."
        "consolidate_safetensors_files (or save with enable_consolidation=True), add the"
        " model's config.json, then import that dir"
    )
