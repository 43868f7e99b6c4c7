"""Read DCP's `.metadata` pickle without letting it run code, into plain or DCP classes.

`.metadata` is a pickled `torch.distributed.checkpoint.metadata.Metadata`. A plain
`pickle.load` of a file from someone else's checkpoint can execute anything, so this
unpickler admits only the handful of classes DCP itself writes and refuses every other
global by name. Callables are never admitted, except `torch.Size` (a tuple of ints) and
torch's layout lookup, which is wrapped so it can only return a layout. The unpickler is
`restricted_pickle`'s: fresh objects only (nothing admitted can be mutated), a memory
budget that grows with the pickle's own bytes (reading stops at its STOP, as torch's does:
bytes after it are counted, `load_plain_metadata_file`, never read or charged), and a
file of at most MAX_METADATA_BYTES. The three
parts of that one job:

* plain stand-ins for the classes DCP pickles (`Metadata`, `TensorStorageMetadata`, ...).
  The offline reader (validate, inspect, export-hf) only needs the attribute values, not
  DCP itself; naming the real classes means importing `torch.distributed.checkpoint`,
  which pulls in DTensor, torch.fx and sympy, paid by every export before it reads a
  byte. Each class keeps the name, fields and pickled state layout of its DCP original
  (torch 2.x `torch/distributed/checkpoint/{metadata,filesystem}.py`), so the same bytes
  unpickle into either. They carry data only and are frozen, so nothing that reads them
  can change what the next reader sees;
* the schema: the unpickler guarantees objects are fresh and of admitted classes, but not
  what their fields hold (a dict where a size belongs, a list nested a million deep in
  `planner_data`). `check_schema` checks it once, for both class tables, so every later
  reader sees only string keys, dtypes from the fixed table, ints in [0, 2**63),
  well-formed chunk lists and storage entries, and shallow plain data. Its messages name
  the key and the offending type, never a repr of the value. It also bounds what the
  file expands to (`Expansion`): the pickle memo lets one chunk list or one nested list
  be named by many keys for a few bytes each, and every reader walks each key's copy;
* loading: `load_plain_metadata_bytes` builds the plain stand-ins (for the offline
  reader), `load_metadata` builds DCP's own classes, which `dcp.load` needs. The
  pickle also names three things of torch itself: dtypes (`torch.float32`), `torch.Size`
  and a layout (`torch.serialization._get_layout("torch.strided")`). The plain table maps
  them to `mfsdp_ckpt.format.dtypes` records, `tuple` and the layout's name, so reading
  metadata imports no torch at all (its import is export's start-up cost:
  bench/export_hf.py).

A `.metadata` of millions of chunks takes minutes to read (bench/dcp_metadata_read.py);
whoever shows progress (the CLI) wraps its work in `reporting_reads(callback)`, and each
file of at least PROGRESS_FROM_BYTES read meanwhile reports (file, bytes read, size) to it,
then each check of what it lists (`CheckSteps`: its schema here, its tables and shared
bytes in `mfsdp_ckpt.storage`) reports (file, check, chunks checked, chunks): seconds more
for half a million chunks. The library prints nothing itself, and its callers deep inside
(validate, export) need no progress argument threaded through.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import UnsafeMetadataError
from mfsdp_ckpt.format import dtypes
from mfsdp_ckpt.format.restricted_pickle import PickleRefused, RestrictedUnpickler
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory

if TYPE_CHECKING:
    import torch
    from torch.distributed.checkpoint.metadata import Metadata as DcpMetadata


# Smaller files are read in seconds (bench/dcp_metadata_read.py times larger ones): no
# progress shown for them.
PROGRESS_FROM_BYTES = 16 << 20
ReadProgress = Callable[[str, int, int], None]  # (file, bytes read, its size)
CheckProgress = Callable[[str, str, int, int], None]  # (file, check, chunks checked, chunks)
CheckReport = Callable[[str, int, int], None]  # CheckProgress bound to one file
_read_progress: ContextVar[tuple[ReadProgress, CheckProgress | None] | None] = ContextVar(
    "_read_progress", default=None
)
# The least chunks between two reports of one check: a report per tensor of a few chunks
# would cost more than the check
CHECK_REPORT_EVERY = 1 << 14


@contextlib.contextmanager
def reporting_reads(
    callback: ReadProgress, checking: CheckProgress | None = None
) -> Iterator[None]:
    """Within this block, every `.metadata` of at least PROGRESS_FROM_BYTES reports its
    reading to `callback` (file, bytes read, size): at 0, along the way and at the end;
    then each check of what it lists reports to `checking` (file, check, chunks checked,
    chunks) the same way (`CheckSteps`): together up to half as long again as the read
    (25 s for half a million chunks)."""
    token = _read_progress.set((callback, checking))
    try:
        yield
    finally:
        _read_progress.reset(token)


def check_reporter(source: str, size: int) -> CheckReport | None:
    """Where the checks of `source`, a `.metadata` of `size` bytes, report (check, chunks
    checked, chunks): the `checking` of the `reporting_reads` block around, for a file of at
    least PROGRESS_FROM_BYTES; else None (nothing reported)."""
    reporting = _read_progress.get() if size >= PROGRESS_FROM_BYTES else None
    checking = reporting[1] if reporting is not None else None
    return functools.partial(checking, source) if checking is not None else None


class CheckSteps:
    """One check of a large `.metadata`'s entries, reported to `report` as (`check`, chunks
    checked, `total`): at 0, at least CHECK_REPORT_EVERY chunks apart, and once at the end.
    A check of half a million chunks takes seconds; each was silent before. With no
    `report` every call returns at once."""

    def __init__(self, report: CheckReport | None, check: str, total: int):
        self._report, self.check, self.total = report, check, total
        self.done = 0
        self._next = CHECK_REPORT_EVERY
        if report is not None:
            report(check, 0, total)

    def add(self, chunks: int) -> None:
        """`chunks` more were checked (an entry's, or a group's)."""
        if self._report is None or self.done >= self.total:
            return
        self.done = min(self.done + chunks, self.total)
        if self.done >= self._next or self.done == self.total:
            self._next = self.done + CHECK_REPORT_EVERY
            self._report(self.check, self.done, self.total)


def listed_chunks(state: Any) -> int:
    """The chunks a state-dict table lists, counting a non-tensor entry as one: the total of
    its checks' progress. Whatever is not a chunk list counts one (the checks refuse it)."""
    if not isinstance(state, dict):
        return 0
    return sum(
        len(chunks) if isinstance(chunks := getattr(item, "chunks", None), (list, tuple)) else 1
        for item in state.values()
    )


@dataclass(frozen=True)
class ChunkStorageMetadata:
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]


class _MEM_FORMAT_ENCODING(Enum):  # DCP's name, as pickled
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


# The name other modules use (the writer, torch_save_format): the class keeps DCP's, which
# the tables look up and a `.metadata` pickles.
MemFormatEncoding = _MEM_FORMAT_ENCODING


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
        for name, value in zip(
            ("dtype", "layout", "requires_grad", "memory_format", "pin_memory"), state
        ):
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


StorageInfo = _StorageInfo  # the name other modules use; the class keeps DCP's, as pickled


_MODULE = "torch.distributed.checkpoint.metadata"
MAX_INT = 2**63 - 1  # sizes and offsets are int64 in torch and on disk
MAX_RANK = 64
MAX_PLAIN_DEPTH = 8  # planner_data is {fqn: (path, segments)}; deeper is not DCP's


def _fail(message: str) -> None:
    raise UnsafeMetadataError(message)


def _is_int(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_INT


def _ints(value: Any, what: str) -> None:
    if (
        not isinstance(value, (tuple, list))
        or len(value) > MAX_RANK
        or not all(_is_int(v) for v in value)
    ):
        _fail(f"{what}: expected at most {MAX_RANK} ints in [0, 2**63), got {_shown(value)}")


MAX_SHOWN_CHARS = 200  # of a refused value in a message: the bad number, never a page


def _shown(value: Any) -> str:
    """`value` as a refusal quotes it, so the line says what is wrong (`(-64,)`, not
    `tuple`): an int, bool, float or None written out, a tuple or list as the tuple of its
    items written so (cut to MAX_SHOWN_CHARS characters), anything else by its type's name.
    An int too long to write (a crafted one of a million digits: `repr` fails past 4300) is
    shown by its size."""
    if isinstance(value, (tuple, list)):
        items = [_shown_item(item) for item in value[: MAX_SHOWN_CHARS // 2]]
        more = ", ..." if len(value) > len(items) else ("," if len(items) == 1 else "")
        return cut_to(f"({', '.join(items)}{more})", MAX_SHOWN_CHARS)
    return _shown_item(value)


def _shown_item(value: Any) -> str:
    if type(value) is int:
        bits = value.bit_length()
        return str(value) if bits <= 256 else f"an int of {bits} bits"
    if value is None or type(value) in (bool, float):
        return repr(value)
    return f"a {type(value).__name__}"


def _field(obj: Any, name: str, what: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError:
        _fail(f"{what}: {type(obj).__name__} lacks field {name!r}")


# What reading a .metadata may expand to, per byte of the file. The pickle memo names an
# object already built in a few bytes, so a file can list one chunk list under thousands of
# keys, or nest one list in itself level after level, and every reader then walks (and
# parse_metadata copies) each reference anew: 300 keys naming one list of 10,000 chunks
# make a file of a few hundred KB into 3M chunk records (validate then ran for minutes;
# tests/ckpt/test_metadata_expansion.py builds such files). So chunks
# are counted once per key that lists them, and plain data (planner_data, transform
# names) once per place that names it. A real .metadata pickles every chunk it lists with
# its storage entry, ~135-150 bytes (scripts/pickle_budget.py; a bare chunk ~40), and
# every plain value it names at least a byte: one chunk per CHUNK_BYTES and one item per
# byte leave real files several times under the limit. The floors keep small files out of
# it: MIN_CHUNKS chunk records and MIN_ITEMS items are read in well under a second.
CHUNK_BYTES = 16
MIN_CHUNKS = 1 << 16
MIN_ITEMS = 1 << 20


class Expansion:
    """What `check_schema` walks of a .metadata of `size` bytes, against its limits: chunks
    once per key that lists them, plain items once per place that names them."""

    def __init__(self, size: int):
        self.size = size
        self.max_chunks = max(MIN_CHUNKS, size // CHUNK_BYTES)
        self.max_items = max(MIN_ITEMS, size)
        self.chunks_seen = self.items_seen = 0

    def chunks(self, count: int, key: str) -> None:
        self.chunks_seen += count
        if self.chunks_seen > self.max_chunks:
            _fail(
                f"its keys list more than {self.max_chunks:,} chunks (one chunk list named by"
                f" several keys counts for each; passed at {key}), more than a file of"
                f" {self.size:,} bytes holds"
            )

    def items(self, count: int, what: str) -> None:
        self.items_seen += count
        if self.items_seen > self.max_items:
            _fail(
                f"{what}: more than {self.max_items:,} values named (one list named in several"
                f" places counts for each), more than a file of {self.size:,} bytes holds"
            )


def _plain(value: Any, what: str, expansion: Expansion, depth: int = 0) -> None:
    """Scalars and shallow tuples/lists/dicts of them: what planner_data holds."""
    expansion.items(1, what)
    if value is None or type(value) in (str, int, float, bool, bytes):
        return
    if depth >= MAX_PLAIN_DEPTH:
        _fail(f"{what}: nested deeper than {MAX_PLAIN_DEPTH}")
    if type(value) in (tuple, list):
        for item in value:
            _plain(item, what, expansion, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _plain(key, what, expansion, depth + 1)
            _plain(item, what, expansion, depth + 1)
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
        # The table's values are whatever each admitted name resolves to: typed dynamically.
        classes: dict[str, Any] = {
            name: value for (module, name), value in allowed.items() if module == _MODULE
        }
        torch_values = [
            value
            for (module, name), value in allowed.items()
            if module == "torch" and name != "Size"
        ]
        layout: Any = allowed[("torch.serialization", "_get_layout")]
        layouts = frozenset(id(layout(name)) for name in _layout_names(layout))
        storage_info: Any = allowed[("torch.distributed.checkpoint.filesystem", "_StorageInfo")]
        return cls(classes, frozenset(id(v) for v in torch_values), layouts, storage_info)


def _layout_names(layout: Any) -> list[str]:

    names = []
    for name in sorted(_LAYOUT_NAMES):
        try:
            layout(name)
            names.append(name)
        except Exception as err:  # a layout this torch lacks
            reraise_if_out_of_memory(err)  # the machine's limit, not torch's lack
            continue
    return names


def _check_tensor(key: str, item: Any, table: _Table, expansion: Expansion) -> None:
    properties = _field(item, "properties", key)
    if not isinstance(properties, table.classes["TensorProperties"]):
        _fail(f"{key}: properties are a {type(properties).__name__}")
    if id(_field(properties, "dtype", key)) not in table.dtypes:
        _fail(f"{key}: dtype is a {type(properties.dtype).__name__}, not a torch dtype")
    if id(_field(properties, "layout", key)) not in table.layouts:
        _fail(f"{key}: layout is not a torch layout")
    for flag in ("requires_grad", "pin_memory"):
        if type(_field(properties, flag, key)) is not bool:
            _fail(f"{key}: {flag} is {_shown(getattr(properties, flag))}, not a bool")
    size = _field(item, "size", key)
    _ints(size, f"{key}: shape")
    chunks = _field(item, "chunks", key)
    if type(chunks) is not list:
        _fail(f"{key}: chunks are a {type(chunks).__name__}, not a list")
    expansion.chunks(len(chunks), key)
    chunk_class = table.classes["ChunkStorageMetadata"]
    for chunk in chunks:
        if not isinstance(chunk, chunk_class):
            _fail(f"{key}: a chunk is a {type(chunk).__name__}")
        _ints(_field(chunk, "offsets", key), f"{key}: chunk offsets")
        _ints(_field(chunk, "sizes", key), f"{key}: chunk sizes")


def _check_storage(storage: Any, table: _Table, expansion: Expansion, steps: CheckSteps) -> None:
    """The storage table, field by field: each entry says which file to open and where to
    seek in it, so a name that is no string or an offset that is no int in [0, 2**63) would
    reach a path join or a seek (the file itself is confined by its reader). `None` is a
    table DCP leaves out. Transform names are counted against `expansion` since the memo
    lets every entry share one long list."""
    if storage is None:
        return
    if not isinstance(storage, dict):
        _fail(f"storage_data is a {type(storage).__name__}, not a table")
    index_class = table.classes["MetadataIndex"]
    for index, info in storage.items():
        steps.add(1)
        if (
            not isinstance(index, index_class)
            or type(_field(index, "fqn", "storage key")) is not str
        ):
            _fail(f"storage_data key is a {type(index).__name__}, not a MetadataIndex")
        where = f"{index.fqn}: storage"
        offset = _field(index, "offset", where)
        if offset is not None:
            _ints(offset, f"{where} index offset")
        if _field(index, "index", where) is not None and not _is_int(index.index):
            _fail(f"{where}: index is {_shown(index.index)}, not an int in [0, 2**63)")
        if not isinstance(info, table.storage_info):
            _fail(f"{where}: entry is a {type(info).__name__}, not _StorageInfo")
        if type(_field(info, "relative_path", where)) is not str:
            _fail(f"{where}: file name is a {type(info.relative_path).__name__}")
        for name in ("offset", "length"):
            if not _is_int(_field(info, name, where)):
                _fail(f"{where}: {name} is {_shown(getattr(info, name))}, not an int in [0, 2**63)")
        transforms = getattr(info, "transform_descriptors", None)
        if transforms is None:
            continue
        if type(transforms) is not list:
            _fail(f"{where}: transforms are not a list of names")
        expansion.items(len(transforms), f"{where} transforms")  # each chunk copies them
        if not all(type(t) is str for t in transforms):
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
    if (
        checkpoint_id is not None
        and not isinstance(checkpoint_id, str)
        and type(checkpoint_id).__name__ not in ("PosixPath", "WindowsPath", "Path")
    ):
        _fail("storage_meta.checkpoint_id is not a path")
    modules = getattr(meta, "modules", [])
    if type(modules) is not list or not all(type(m) is str for m in modules):
        _fail("storage_meta.modules is not a list of names")


def check_schema(
    metadata: Any,
    allowed: dict[tuple[str, str], object],
    size: int,
    report: CheckReport | None = None,
) -> None:
    """Raise UnsafeMetadataError unless `metadata` has exactly DCP's shape (module docstring)
    and expands to no more than a pickle of `size` bytes may (`Expansion`). Its progress goes
    to `report` (`CheckSteps`: the state dict's chunks, then the storage entries)."""
    table = _Table.of(allowed)
    expansion = Expansion(size)
    state = _field(metadata, "state_dict_metadata", "Metadata")
    if not isinstance(state, dict):
        _fail("Metadata has no state_dict_metadata table")
    storage = getattr(metadata, "storage_data", None)
    entries = len(storage) if isinstance(storage, dict) else 0
    steps = CheckSteps(report, "schema", listed_chunks(state) + entries)
    tensor_class, bytes_class = (
        table.classes["TensorStorageMetadata"],
        table.classes["BytesStorageMetadata"],
    )
    for key, item in state.items():
        if type(key) is not str:
            _fail(f"state dict key is a {type(key).__name__}, not a string")
        if isinstance(item, tensor_class):
            _check_tensor(key, item, table, expansion)
            steps.add(len(_field(item, "chunks", key)))  # a list: _check_tensor checked it
        elif not isinstance(item, bytes_class):
            _fail(f"{key}: unknown metadata entry {type(item).__name__}")
        else:
            steps.add(1)
    _check_storage(storage, table, expansion, steps)
    _plain(getattr(metadata, "planner_data", None), "planner_data", expansion)
    _check_storage_meta(getattr(metadata, "storage_meta", None), table)
    version = getattr(metadata, "version", None)
    if version is not None and type(version) is not str:
        _fail("version is not a string")


# A .metadata takes ~135-150 bytes per chunk (scripts/pickle_budget.py): a 405B model with
# Adam saved on 1024 ranks is ~3.5M chunks, ~525 MB. 1 GiB leaves room for twice that; a
# larger (or sparse) file is refused before it is read. Reading it holds at most
# restricted_pickle's budget for its pickle (BUDGET_PER_BYTE per byte), and the pickle's bytes
# when they are given as bytes (`load_plain_metadata_file` and `load_metadata` stream them).
MAX_METADATA_BYTES = 1 << 30

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
_LAYOUTS = {
    name: name
    for name in (
        f"torch.{layout}"
        for layout in (
            "strided",
            "sparse_coo",
            "sparse_csr",
            "sparse_csc",
            "sparse_bsr",
            "sparse_bsc",
            "_mkldnn",
            "jagged",
        )
    )
}
_LAYOUT_NAMES = frozenset(_LAYOUTS)


def _size(dims: Any) -> tuple:
    """Stand-in for torch.Size, which DCP pickles as `torch.Size((d0, d1, ...))`: that very
    tuple (the reader checks its ints), never a copy of anything else (`tuple` would turn a
    memoized string into a tuple of characters at each call)."""
    if type(dims) is not tuple:
        raise UnsafeMetadataError(f"torch.Size of a {type(dims).__name__}, not a tuple")
    return dims


def _layout_name(name: str) -> str:
    """Stand-in for torch.serialization._get_layout: only ever yields a known layout's name."""
    if not isinstance(name, str) or name not in _LAYOUTS:
        raise UnsafeMetadataError(f"layout name {cut_to(repr(name), 80)} is not a torch layout")
    return _LAYOUTS[name]


def _layout_by_name(name: str) -> torch.layout:
    """`_layout_name`, then the torch.layout itself (for DCP's own classes)."""
    import torch

    return getattr(torch, _layout_name(name)[len("torch.") :])


def _class_table(
    metadata_classes: ModuleType, storage_info: type, torch_globals: dict[tuple[str, str], object]
) -> dict[tuple[str, str], object]:
    """Every global a DCP `.metadata` may name, mapped to what builds it: torch's dtypes,
    Size and layouts as `torch_globals` builds them, and DCP's metadata classes taken from
    `metadata_classes` (DCP's own module, or this one for the plain stand-ins)."""
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
    enums = tuple(v for v in allowed.values() if isinstance(v, type) and issubclass(v, Enum))
    allowed[("builtins", "getattr")] = functools.partial(_enum_member, enums)
    return allowed


def _enum_member(enums: tuple[type[Enum], ...], cls: Any, name: Any) -> Enum:
    """Stand-in for `getattr` as early CPython 3.11 releases (3.11.2, Debian 12's) pickle an
    enum member (`getattr(_MEM_FORMAT_ENCODING, 'TORCH_CONTIGUOUS_FORMAT')`; later versions
    pickle `cls(value)`): every DCP save made with those Pythons names it. Only a member of
    an admitted enum class is looked up; anything else is refused."""
    if cls not in enums or not isinstance(name, str) or name not in cls.__members__:
        raise UnsafeMetadataError(
            f"getattr({cut_to(repr(getattr(cls, '__name__', cls)), 80)}, {cut_to(repr(name), 80)})"
        )
    return cls[name]


MetadataTable = Literal["plain", "dcp"]


def allowed_classes(table: MetadataTable) -> dict[tuple[str, str], object]:
    """The globals a `.metadata` may name, each mapped to what builds it: `plain`, the
    stand-ins above (reading imports no DCP), or `dcp`, DCP's own classes (what `dcp.load`
    takes). Public as the allow-list itself: scripts/pickle_budget.py measures what each
    table's records cost, and tests feed each table hostile pickles."""
    return _plain_classes() if table == "plain" else _dcp_classes()


@functools.cache
def _plain_classes() -> dict[tuple[str, str], object]:
    torch_globals: dict[tuple[str, str], object] = {
        ("torch", name): dtype for name, dtype in dtypes.BY_NAME.items()
    }
    torch_globals[("torch", "Size")] = _size
    torch_globals[("torch.serialization", "_get_layout")] = _layout_name
    return _class_table(
        sys.modules[__name__], _StorageInfo, torch_globals
    )  # the plain classes above


@functools.cache
def _dcp_classes() -> dict[tuple[str, str], object]:
    import torch
    from torch.distributed.checkpoint import metadata as dcp_metadata
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    torch_globals: dict[tuple[str, str], object] = {
        ("torch", attr): value
        for attr in dir(torch)
        if isinstance(value := getattr(torch, attr, None), torch.dtype)
    }
    torch_globals[("torch", "Size")] = torch.Size
    torch_globals[("torch.serialization", "_get_layout")] = _layout_by_name
    return _class_table(dcp_metadata, _StorageInfo, torch_globals)


def record_types(allowed: dict[tuple[str, str], object]) -> tuple[type, ...]:
    """The record classes of a table: the only things a pickle may create and fill (the
    `records` a RestrictedUnpickler of that table is given)."""
    return tuple(v for v in allowed.values() if isinstance(v, type) and dataclasses.is_dataclass(v))


def _unpickle(
    data: bytes | BinaryIO,
    source: str,
    allowed: dict[tuple[str, str], object],
    size: int | None = None,
) -> tuple[Any, int]:
    """The Metadata object in `data` (bytes, or a file of `size` bytes), built from
    `allowed` only (see restricted_pickle) and checked against the schema, and the bytes
    its pickle took: reading stops at the pickle's STOP as torch's does, and its budget and
    expansion limits follow the pickle's own size, so bytes after it buy nothing. `source`
    names the file in errors."""
    size = len(data) if isinstance(data, (bytes, bytearray)) else size
    reporting = _read_progress.get() if (size or 0) >= PROGRESS_FROM_BYTES else None
    progress = functools.partial(reporting[0], source) if reporting is not None else None
    try:
        reader = RestrictedUnpickler(
            data, allowed, record_types(allowed), progress=progress, size=size
        )
        result = reader.load()
    except (PickleRefused, UnsafeMetadataError) as err:
        raise UnsafeMetadataError(f"{source}: {err}") from None
    except Exception as err:  # any damage in the pickle stream: truncated, bad opcode, bad args
        reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
        detail = str(err) or (
            "the file ends early (truncated?)" if isinstance(err, EOFError) else ""
        )
        raise UnsafeMetadataError(
            f"{source}: unreadable DCP metadata ({type(err).__name__}: {cut_to(detail, 200)})"
        ) from None
    metadata_class: Any = allowed[(_DCP_METADATA_MODULE, "Metadata")]
    if not isinstance(result, metadata_class):
        raise UnsafeMetadataError(f"{source}: holds a {type(result).__name__}, not DCP Metadata")
    try:
        check_schema(result, allowed, reader.consumed, check_reporter(source, size or 0))
    except UnsafeMetadataError as err:
        raise UnsafeMetadataError(f"{source}: {err}") from None
    return result, reader.consumed


def load_plain_metadata_bytes(data: bytes, source: str = "<bytes>") -> Metadata:
    """DCP metadata as the plain stand-ins above (no DCP import); for reading, not `dcp.load`."""
    return _unpickle(data, source, _plain_classes())[0]


def load_plain_metadata_file(file: BinaryIO, size: int, source: str) -> tuple[Metadata, int]:
    """`load_plain_metadata_bytes` of a file of `size` bytes, read from its start up to the
    pickle's STOP and no further, and the bytes after it (counted, never read or held: not
    a field of the Metadata, which a writer pickles as DCP's own)."""
    metadata, consumed = _unpickle(file, source, _plain_classes(), size)
    return metadata, size - consumed


# Bytes read from a .metadata file at a time: the unpickler asks for restricted_pickle.WINDOW.
READ_BUFFER_BYTES = 1 << 20


def load_metadata(path: str | Path) -> DcpMetadata:
    """Read a `.metadata` file safely (see module docstring) into DCP's own `Metadata`:
    a regular file inside its own directory, at most MAX_METADATA_BYTES, read once up to
    its pickle's STOP, as torch's reader does (what follows is never read)."""
    path = Path(path)
    fd = safe_files.open_regular(path, root=path.parent)
    with open(fd, "rb", buffering=READ_BUFFER_BYTES) as file:
        size = os.fstat(fd).st_size
        safe_files.check_size(path, size, MAX_METADATA_BYTES)
        return _unpickle(file, str(path), _dcp_classes(), size)[0]
