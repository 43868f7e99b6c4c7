"""Plain stand-ins for the classes DCP pickles into `.metadata`, for offline reading.

The offline reader (validate, inspect, export-hf) only needs the attribute values in
`.metadata`, not DCP itself. Naming the real classes means importing
`torch.distributed.checkpoint`, which pulls in DTensor, torch.fx and sympy: about 0.65 s
on a quiet machine and several seconds on a loaded one, paid by every export before it
reads a byte. `safe_metadata` builds these instead when the caller only reads; a real
`dcp.load` still gets DCP's own classes (`safe_metadata.load_metadata`).

Each class keeps the name, fields and pickled state layout of its DCP original
(torch 2.x `torch/distributed/checkpoint/{metadata,filesystem}.py`), so the same bytes
unpickle into either. They carry data only: no behaviour worth calling, and they are
frozen, so nothing that reads them can change what the next reader sees. What the pickle
names of torch itself arrives plain too (`safe_metadata`): a dtype as a
`mfsdp_ckpt.format.dtypes.DType`, a `torch.Size` as a tuple, a layout as its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass(frozen=True)
class ChunkStorageMetadata:
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]


class _MEM_FORMAT_ENCODING(Enum):  # DCP's name, as pickled
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


@dataclass(frozen=True)
class TensorProperties:
    """DCP pickles these as a 5-tuple (its `__getstate__`); `memory_format` stays encoded."""

    dtype: Any = None  # a mfsdp_ckpt.format.dtypes.DType
    layout: Any = None  # its name: "torch.strided"
    requires_grad: bool = False
    memory_format: _MEM_FORMAT_ENCODING = _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT
    pin_memory: bool = False

    def __setstate__(self, state: tuple) -> None:
        if not isinstance(state, tuple) or len(state) != 5:
            raise ValueError("TensorProperties state is not a 5-tuple")
        for name, value in zip(("dtype", "layout", "requires_grad", "memory_format", "pin_memory"), state):
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class TensorStorageMetadata:
    properties: TensorProperties
    size: tuple[int, ...]
    chunks: list[ChunkStorageMetadata]


@dataclass(frozen=True)
class BytesStorageMetadata:
    pass


@dataclass(frozen=True)
class StorageMeta:
    checkpoint_id: Any = None
    save_id: str | None = None
    load_id: str | None = None
    modules: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Metadata:
    state_dict_metadata: dict[str, TensorStorageMetadata | BytesStorageMetadata]
    planner_data: Any = None
    storage_data: Any = None
    storage_meta: StorageMeta | None = None
    version: str | None = None


@dataclass(frozen=True)
class MetadataIndex:
    """Key of `Metadata.storage_data`: equal and hashed by (fqn, offset) as DCP's is.
    `offset` (a torch.Size in DCP's own) unpickles as a tuple of ints."""

    fqn: str
    offset: tuple[int, ...] | None = None
    index: int | None = field(default=None, hash=False, compare=False)


@dataclass(frozen=True)
class _StorageInfo:
    """Where a blob lives (`torch.distributed.checkpoint.filesystem._StorageInfo`).
    DCP leaves `None` fields out of the pickled state, hence the one class default; a
    missing required field stays missing, so the reader reports it."""

    relative_path: str
    offset: int
    length: int
    transform_descriptors: list[str] | None = None


__all__ = [
    "BytesStorageMetadata",
    "ChunkStorageMetadata",
    "Metadata",
    "MetadataIndex",
    "StorageMeta",
    "TensorProperties",
    "TensorStorageMetadata",
]
