"""Read DCP's `.metadata` pickle without letting it run code.

`.metadata` is a pickled `torch.distributed.checkpoint.metadata.Metadata`. A plain
`pickle.load` of a file from someone else's checkpoint can execute anything, so this
unpickler admits only the handful of classes DCP itself writes and refuses every other
global by name. Callables are never admitted, except torch's layout lookup, which is
wrapped so it can only return a layout object.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import torch
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.filesystem import _StorageInfo

MAX_METADATA_BYTES = 1 << 30  # a 1 GiB .metadata would describe ~10M tensors: refuse beyond


class UnsafeMetadataError(ValueError):
    """The `.metadata` file is not plain DCP metadata (it names a forbidden global, or is damaged)."""


def _layout_by_name(name: str) -> torch.layout:
    """Stand-in for torch.serialization._get_layout: only ever yields a torch.layout."""
    if not isinstance(name, str) or not name.startswith("torch."):
        raise UnsafeMetadataError(f"layout name {name!r} is not a torch layout")
    layout = getattr(torch, name[len("torch.") :], None)
    if not isinstance(layout, torch.layout):
        raise UnsafeMetadataError(f"layout name {name!r} is not a torch layout")
    return layout


def _allowed_globals() -> dict[tuple[str, str], object]:
    allowed: dict[tuple[str, str], object] = {
        ("torch.serialization", "_get_layout"): _layout_by_name,
        ("torch", "Size"): torch.Size,
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): _StorageInfo,
        ("collections", "OrderedDict"): __import__("collections").OrderedDict,
        ("pathlib", "PosixPath"): Path,
        ("pathlib", "WindowsPath"): Path,
        ("pathlib", "Path"): Path,
    }
    for name in (
        "Metadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "TensorProperties",
        "ChunkStorageMetadata",
        "MetadataIndex",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    ):
        if hasattr(dcp_metadata, name):
            allowed[("torch.distributed.checkpoint.metadata", name)] = getattr(dcp_metadata, name)
    for attr in dir(torch):
        value = getattr(torch, attr, None)
        if isinstance(value, torch.dtype):
            allowed[("torch", attr)] = value
    return allowed


_ALLOWED = _allowed_globals()


class _RestrictedUnpickler(pickle._Unpickler):
    """The pure-Python unpickler: its memo is a dict. The C unpickler's memo is an array
    sized by the largest index a PUT opcode names, so a 9-byte file with
    `LONG_BINPUT 0x7fffffff` makes it allocate and zero 16 GiB (about 10x slower to
    parse, which for DCP metadata is milliseconds to seconds)."""

    def find_class(self, module: str, name: str) -> object:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafeMetadataError(
                f"refusing to load global {module}.{name}: not a DCP metadata type"
            ) from None


def load_metadata_bytes(data: bytes, source: str = "<bytes>") -> dcp_metadata.Metadata:
    """Unpickle DCP metadata from bytes with the allow-list; `source` names the file in errors."""
    try:
        result = _RestrictedUnpickler(io.BytesIO(data)).load()
    except UnsafeMetadataError as err:
        raise UnsafeMetadataError(f"{source}: {err}") from None
    except Exception as err:  # any damage in the pickle stream: truncated, bad opcode, bad args
        detail = str(err) or ("the file ends early (truncated?)" if isinstance(err, EOFError) else "")
        raise UnsafeMetadataError(
            f"{source}: unreadable DCP metadata ({type(err).__name__}: {detail[:200]})"
        ) from None
    if not isinstance(result, dcp_metadata.Metadata):
        raise UnsafeMetadataError(
            f"{source}: holds a {type(result).__name__}, not DCP Metadata"
        )
    if not isinstance(getattr(result, "state_dict_metadata", None), dict):
        raise UnsafeMetadataError(f"{source}: Metadata has no state_dict_metadata table")
    return result


def load_metadata(path: str | Path) -> dcp_metadata.Metadata:
    """Read a `.metadata` file safely (see module docstring)."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_METADATA_BYTES:
        raise UnsafeMetadataError(f"{path}: {size} bytes is too large for DCP metadata")
    return load_metadata_bytes(path.read_bytes(), source=str(path))
