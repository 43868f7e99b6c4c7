"""Read DCP's `.metadata` pickle without letting it run code.

`.metadata` is a pickled `torch.distributed.checkpoint.metadata.Metadata`. A plain
`pickle.load` of a file from someone else's checkpoint can execute anything, so this
unpickler admits only the handful of classes DCP itself writes and refuses every other
global by name. Callables are never admitted, except `torch.Size` (a tuple of ints) and
torch's layout lookup, which is wrapped so it can only return a layout. The unpickler is
`restricted_pickle`'s: fresh objects only (nothing admitted can be mutated), a bounded
opcode count, and a file of at most MAX_METADATA_BYTES; what it returns must then match
DCP's shape exactly (`metadata_schema`).

Two class tables, one unpickler: `load_plain_metadata_bytes` builds the plain stand-ins
of `mfsdp_ckpt.format.plain_metadata` (for the offline reader: importing DCP costs seconds of
start-up), `load_metadata[_bytes]` builds DCP's own classes, which `dcp.load` needs.
The pickle also names three things of torch itself: dtypes (`torch.float32`), `torch.Size`
and a layout (`torch.serialization._get_layout("torch.strided")`). The plain table maps
them to `mfsdp_ckpt.format.dtypes` records, `tuple` and the layout's name, so reading metadata
imports no torch at all (its import is export's start-up cost: bench/export_hf.py).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.format import dtypes, metadata_schema, plain_metadata
from mfsdp_ckpt.errors import UnsafeMetadataError
from mfsdp_ckpt.format.restricted_pickle import PickleRefused, restricted_loads

if TYPE_CHECKING:
    import torch
    from torch.distributed.checkpoint.metadata import Metadata

# A .metadata costs ~144 bytes per chunk (scripts/pickle_budget.py): 256 MiB is far past what
# the opcode limit admits anyway, and a larger (or sparse) file is refused before it is read.
MAX_METADATA_BYTES = 256 << 20

_DCP_METADATA_MODULE = "torch.distributed.checkpoint.metadata"
_DCP_FILESYSTEM_MODULE = "torch.distributed.checkpoint.filesystem"
_DCP_METADATA_CLASSES = (
    "Metadata",
    "TensorStorageMetadata",
    "BytesStorageMetadata",
    "TensorProperties",
    "ChunkStorageMetadata",
    "MetadataIndex",
    "StorageMeta",
    "_MEM_FORMAT_ENCODING",
)


# torch's layouts (`torch.strided`, ...), by the names `_get_layout` is pickled with; the
# values are the canonical strings the plain table hands out (the schema compares identity)
_LAYOUTS = {name: name for name in (f"torch.{layout}" for layout in (
    "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn", "jagged"))}
_LAYOUT_NAMES = frozenset(_LAYOUTS)


def _layout_name(name: str) -> str:
    """Stand-in for torch.serialization._get_layout: only ever yields a known layout's name."""
    if not isinstance(name, str) or name not in _LAYOUTS:
        raise UnsafeMetadataError(f"layout name {name!r:.80} is not a torch layout")
    return _LAYOUTS[name]


def _layout_by_name(name: str) -> torch.layout:
    """`_layout_name`, then the torch.layout itself (for DCP's own classes)."""
    import torch

    return getattr(torch, _layout_name(name)[len("torch.") :])


def _class_table(metadata_classes: ModuleType, storage_info: type, torch_globals: dict[tuple[str, str], object]
                 ) -> dict[tuple[str, str], object]:
    """Every global a DCP `.metadata` may name, mapped to what builds it: torch's dtypes,
    Size and layouts as `torch_globals` builds them, and DCP's metadata classes taken from
    `metadata_classes` (DCP's own module or `plain_metadata`)."""
    allowed: dict[tuple[str, str], object] = {
        **torch_globals,
        (_DCP_FILESYSTEM_MODULE, "_StorageInfo"): storage_info,
        ("collections", "OrderedDict"): OrderedDict,
        ("pathlib", "PosixPath"): Path,
        ("pathlib", "WindowsPath"): Path,
        ("pathlib", "Path"): Path,
    }
    for name in _DCP_METADATA_CLASSES:
        if hasattr(metadata_classes, name):
            allowed[(_DCP_METADATA_MODULE, name)] = getattr(metadata_classes, name)
    return allowed


@functools.cache
def _plain_classes() -> dict[tuple[str, str], object]:
    torch_globals: dict[tuple[str, str], object] = {("torch", name): dtype for name, dtype in dtypes.BY_NAME.items()}
    torch_globals[("torch", "Size")] = tuple  # torch.Size is a tuple of ints; the reader checks the ints
    torch_globals[("torch.serialization", "_get_layout")] = _layout_name
    return _class_table(plain_metadata, plain_metadata._StorageInfo, torch_globals)


@functools.cache
def _dcp_classes() -> dict[tuple[str, str], object]:
    import torch
    from torch.distributed.checkpoint import metadata as dcp_metadata
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    torch_globals: dict[tuple[str, str], object] = {
        ("torch", attr): value for attr in dir(torch) if isinstance(value := getattr(torch, attr, None), torch.dtype)
    }
    torch_globals[("torch", "Size")] = torch.Size
    torch_globals[("torch.serialization", "_get_layout")] = _layout_by_name
    return _class_table(dcp_metadata, _StorageInfo, torch_globals)


def _records(allowed: dict[tuple[str, str], object]) -> tuple[type, ...]:
    """The record classes of a table: the only things a pickle may create and fill."""
    return tuple(v for v in allowed.values() if isinstance(v, type) and dataclasses.is_dataclass(v))


def _unpickle(data: bytes, source: str, allowed: dict[tuple[str, str], object]) -> Any:
    """The Metadata object in `data`, built from `allowed` only (see restricted_pickle) and
    checked against the schema; `source` names the file in errors."""
    try:
        result = restricted_loads(data, allowed, _records(allowed))
    except (PickleRefused, UnsafeMetadataError) as err:
        raise UnsafeMetadataError(f"{source}: {err}") from None
    except Exception as err:  # any damage in the pickle stream: truncated, bad opcode, bad args
        detail = str(err) or ("the file ends early (truncated?)" if isinstance(err, EOFError) else "")
        raise UnsafeMetadataError(
            f"{source}: unreadable DCP metadata ({type(err).__name__}: {detail[:200]})"
        ) from None
    if not isinstance(result, allowed[(_DCP_METADATA_MODULE, "Metadata")]):
        raise UnsafeMetadataError(
            f"{source}: holds a {type(result).__name__}, not DCP Metadata"
        )
    try:
        metadata_schema.check(result, allowed)
    except UnsafeMetadataError as err:
        raise UnsafeMetadataError(f"{source}: {err}") from None
    return result


def load_plain_metadata_bytes(data: bytes, source: str = "<bytes>") -> plain_metadata.Metadata:
    """DCP metadata as `plain_metadata` objects (no DCP import); for reading, not `dcp.load`."""
    return _unpickle(data, source, _plain_classes())


def load_metadata_bytes(data: bytes, source: str = "<bytes>") -> Metadata:
    """DCP metadata as DCP's own `Metadata`, with the allow-list; `source` names the file in errors."""
    return _unpickle(data, source, _dcp_classes())


def load_metadata(path: str | Path) -> Metadata:
    """Read a `.metadata` file safely (see module docstring) into DCP's own `Metadata`:
    a regular file inside its own directory, at most MAX_METADATA_BYTES, read once."""
    path = Path(path)
    data = safe_files.read_bytes(path, MAX_METADATA_BYTES, root=path.parent)
    return load_metadata_bytes(data, source=str(path))
