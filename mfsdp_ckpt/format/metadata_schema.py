"""The fixed shape of DCP metadata, checked on whatever a `.metadata` pickle produced.

The restricted unpickler guarantees objects are fresh and of admitted classes, but not
what their fields hold: a crafted file can put a dict where a size belongs, a string
where a dtype belongs, or a list nested a million deep in `planner_data`. Checked here
once, for both class tables (DCP's own classes and `plain_metadata`'s), so every later
reader (offline tools, `dcp.load`) sees only: string keys, dtypes from the fixed table,
ints in [0, 2**63), well-formed chunk lists and storage entries, and shallow plain data.

Messages name the key and the offending type, never a repr of the value (which could be
huge or deeply nested).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mfsdp_ckpt.errors import UnsafeMetadataError

_MODULE = "torch.distributed.checkpoint.metadata"
MAX_INT = 2**63 - 1  # sizes and offsets are int64 in torch and on disk
MAX_RANK = 64
MAX_PLAIN_DEPTH = 8  # planner_data is {fqn: (path, segments)}; deeper is not DCP's


def _fail(message: str) -> None:
    raise UnsafeMetadataError(message)


def _is_int(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_INT


def _ints(value: Any, what: str) -> None:
    if not isinstance(value, (tuple, list)) or len(value) > MAX_RANK or not all(_is_int(v) for v in value):
        _fail(f"{what}: expected at most {MAX_RANK} ints in [0, 2**63), got {type(value).__name__}")


def _field(obj: Any, name: str, what: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError:
        _fail(f"{what}: {type(obj).__name__} lacks field {name!r}")


def _plain(value: Any, what: str, depth: int = 0) -> None:
    """Scalars and shallow tuples/lists/dicts of them: what planner_data holds."""
    if value is None or type(value) in (str, int, float, bool, bytes):
        return
    if depth >= MAX_PLAIN_DEPTH:
        _fail(f"{what}: nested deeper than {MAX_PLAIN_DEPTH}")
    if type(value) in (tuple, list):
        for item in value:
            _plain(item, what, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _plain(key, what, depth + 1)
            _plain(item, what, depth + 1)
    else:
        _fail(f"{what}: holds a {type(value).__name__}, not plain data")


@dataclasses.dataclass(frozen=True)
class _Table:
    """The classes and torch values one class table resolves names to."""

    classes: dict[str, type]
    dtypes: frozenset[int]  # ids of the admitted dtype objects (compared by identity)
    layouts: frozenset[int]
    storage_info: type

    @classmethod
    def of(cls, allowed: dict[tuple[str, str], object]) -> _Table:
        classes = {name: value for (module, name), value in allowed.items() if module == _MODULE}
        torch_values = [value for (module, name), value in allowed.items() if module == "torch" and name != "Size"]
        layout = allowed[("torch.serialization", "_get_layout")]
        layouts = frozenset(id(layout(name)) for name in _layout_names(layout))
        storage_info = allowed[("torch.distributed.checkpoint.filesystem", "_StorageInfo")]
        return cls(classes, frozenset(id(v) for v in torch_values), layouts, storage_info)


def _layout_names(layout: Any) -> list[str]:
    from mfsdp_ckpt.format.safe_metadata import _LAYOUT_NAMES

    names = []
    for name in sorted(_LAYOUT_NAMES):
        try:
            layout(name)
            names.append(name)
        except Exception:  # a layout this torch lacks
            continue
    return names


def _check_tensor(key: str, item: Any, table: _Table) -> None:
    properties = _field(item, "properties", key)
    if not isinstance(properties, table.classes["TensorProperties"]):
        _fail(f"{key}: properties are a {type(properties).__name__}")
    if id(_field(properties, "dtype", key)) not in table.dtypes:
        _fail(f"{key}: dtype is a {type(properties.dtype).__name__}, not a torch dtype")
    if id(_field(properties, "layout", key)) not in table.layouts:
        _fail(f"{key}: layout is not a torch layout")
    for flag in ("requires_grad", "pin_memory"):
        if type(_field(properties, flag, key)) is not bool:
            _fail(f"{key}: {flag} is not a bool")
    size = _field(item, "size", key)
    _ints(size, f"{key}: shape")
    chunks = _field(item, "chunks", key)
    if type(chunks) is not list:
        _fail(f"{key}: chunks are a {type(chunks).__name__}, not a list")
    chunk_class = table.classes["ChunkStorageMetadata"]
    for chunk in chunks:
        if not isinstance(chunk, chunk_class):
            _fail(f"{key}: a chunk is a {type(chunk).__name__}")
        _ints(_field(chunk, "offsets", key), f"{key}: chunk offsets")
        _ints(_field(chunk, "sizes", key), f"{key}: chunk sizes")


def _check_storage(storage: Any, table: _Table) -> None:
    if storage is None:
        return
    if not isinstance(storage, dict):
        _fail(f"storage_data is a {type(storage).__name__}, not a table")
    index_class = table.classes["MetadataIndex"]
    for index, info in storage.items():
        if not isinstance(index, index_class) or type(_field(index, "fqn", "storage key")) is not str:
            _fail(f"storage_data key is a {type(index).__name__}, not a MetadataIndex")
        where = f"{index.fqn}: storage"
        offset = _field(index, "offset", where)
        if offset is not None:
            _ints(offset, f"{where} index offset")
        if _field(index, "index", where) is not None and not _is_int(index.index):
            _fail(f"{where}: index is not an int")
        if not isinstance(info, table.storage_info):
            _fail(f"{where}: entry is a {type(info).__name__}, not _StorageInfo")
        if type(_field(info, "relative_path", where)) is not str:
            _fail(f"{where}: file name is a {type(info.relative_path).__name__}")
        for name in ("offset", "length"):
            if not _is_int(_field(info, name, where)):
                _fail(f"{where}: {name} is not an int in [0, 2**63)")
        transforms = getattr(info, "transform_descriptors", None)
        if transforms is not None and (type(transforms) is not list or not all(type(t) is str for t in transforms)):
            _fail(f"{where}: transforms are not a list of names")


def _check_storage_meta(meta: Any, table: _Table) -> None:
    if meta is None:
        return
    if not isinstance(meta, table.classes.get("StorageMeta", ())):
        _fail(f"storage_meta is a {type(meta).__name__}")
    for name in ("save_id", "load_id"):
        if getattr(meta, name, None) is not None and type(getattr(meta, name)) is not str:
            _fail(f"storage_meta.{name} is not a string")
    checkpoint_id = getattr(meta, "checkpoint_id", None)
    if checkpoint_id is not None and not isinstance(checkpoint_id, str) and type(checkpoint_id).__name__ not in (
            "PosixPath", "WindowsPath", "Path"):
        _fail("storage_meta.checkpoint_id is not a path")
    modules = getattr(meta, "modules", [])
    if type(modules) is not list or not all(type(m) is str for m in modules):
        _fail("storage_meta.modules is not a list of names")


def check(metadata: Any, allowed: dict[tuple[str, str], object]) -> None:
    """Raise UnsafeMetadataError unless `metadata` has exactly DCP's shape (module docstring)."""
    table = _Table.of(allowed)
    state = _field(metadata, "state_dict_metadata", "Metadata")
    if not isinstance(state, dict):
        _fail("Metadata has no state_dict_metadata table")
    tensor_class, bytes_class = table.classes["TensorStorageMetadata"], table.classes["BytesStorageMetadata"]
    for key, item in state.items():
        if type(key) is not str:
            _fail(f"state dict key is a {type(key).__name__}, not a string")
        if isinstance(item, tensor_class):
            _check_tensor(key, item, table)
        elif not isinstance(item, bytes_class):
            _fail(f"{key}: unknown metadata entry {type(item).__name__}")
    _check_storage(getattr(metadata, "storage_data", None), table)
    _plain(getattr(metadata, "planner_data", None), "planner_data")
    _check_storage_meta(getattr(metadata, "storage_meta", None), table)
    version = getattr(metadata, "version", None)
    if version is not None and type(version) is not str:
        _fail("version is not a string")
