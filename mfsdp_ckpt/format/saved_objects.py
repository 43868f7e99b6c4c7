"""Small `torch.save` archives from Megatron checkpoints read as data, without torch.load.

Two of them carry what a reader of a Megatron-LM or Megatron-Bridge checkpoint needs:

* `args` in a Megatron-LM fsdp_dtensor DCP: a pickled `argparse.Namespace` of every
  command-line setting, the only record of the model's architecture there. It also holds
  enums (`AttnBackend`), dtypes (`torch.bfloat16`), partials and other objects of code
  this process has not imported and must not import. `load_namespace` reads it with the
  restricted unpickler: the Namespace becomes a plain dict, every other global a
  `Placeholder` (its name), every call of one a `PlaceholderCall` (inert data). Globals of
  the modules that reach the operating system or the interpreter (`os.system`,
  `builtins.eval`, ...) never appear in a Namespace Megatron writes: they are refused,
  but for the enum classes of those modules Megatron-LM's args hold members of
  (`ENUM_LOOKUPS`: `exit_signal` is `signal.SIGTERM`), whose one admitted call is the
  member's lookup by one int.
* Megatron-Bridge's `latest_train_state.pt` / `train_state.pt`: a dict of 0-dim tensors
  (`step`, `consumed_train_samples`, ...). `load_scalars` reads their values from the
  tensors' records by dtype, never through a tensor.

Both are bounded: the archive by `blob_guard` (members, sizes, no compression), the pickle
by a memory budget, the file by MAX_SAVED_OBJECT_BYTES. Errors are one line,
CheckpointFormatError, naming `where`.
"""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Callable
from typing import Any

from mfsdp_ckpt.check.printable import error_line
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import dtypes
from mfsdp_ckpt.format.blob_guard import blob_pickle, open_blob
from mfsdp_ckpt.format.restricted_pickle import (
    DETAIL_CHARS,
    PickleRefused,
    Placeholder,
    PlaceholderPolicy,
    restricted_loads,
)
from mfsdp_ckpt.format.zip_crc import read_member
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory

MAX_SAVED_OBJECT_BYTES = 16 << 20  # a Namespace of ~600 settings is ~40 KB; train_state ~2 KB
# What their pickles may retain (restricted_pickle's memory budget): a Namespace of ~600
# settings is charged ~200 KB, a train state ~25 KB.
NAMESPACE_BUDGET = 16 << 20
SCALARS_BUDGET = 1 << 20

# Modules whose globals run commands, code or I/O: no Megatron Namespace names one.
REFUSED_MODULES = frozenset(
    {
        "builtins",
        "__builtin__",
        "os",
        "posix",
        "nt",
        "subprocess",
        "sys",
        "importlib",
        "runpy",
        "pickle",
        "_pickle",
        "marshal",
        "shutil",
        "socket",
        "ctypes",
        "code",
        "codeop",
        "pty",
        "types",
        "operator",
        "webbrowser",
        "io",
        "_io",
        "pathlib",
        "tempfile",
        "multiprocessing",
        "signal",
        "inspect",
        "shlex",
        "commands",
        "popen2",
        "platform",
        "asyncio",
        "threading",
        "_thread",
        "urllib",
        "http",
        "ftplib",
        "smtplib",
        "telnetlib",
        "zipimport",
        "pkgutil",
        "site",
        "sysconfig",
        "gc",
        "weakref",
        "copyreg",
        "torch.hub",
        "torch.serialization",
        "numpy.testing",
    }
)


# IntEnum classes of REFUSED_MODULES whose pickled members Megatron-LM's args hold: a
# member pickles as its class called with its int value, a lookup that runs nothing.
# `exit_signal` (Megatron-LM's TrainingConfig since core_v0.16.0) is `signal.SIGTERM`.
ENUM_LOOKUPS = frozenset({"signal.Signals"})


def args_placeholder(module: str, name: str) -> Placeholder:
    """What a global in Megatron-LM's `args` stands for: a Placeholder (a user's class or
    function named in a value is recorded, never imported), refused for the modules that
    can run code or reach the system, which a checkpoint's args name only for an enum
    member of ENUM_LOOKUPS (a Placeholder admitting that lookup alone)."""
    if f"{module}.{name}" in ENUM_LOOKUPS:
        return Placeholder(module, name, lookup=True)
    root = module.split(".")[0]
    if module in REFUSED_MODULES or root in REFUSED_MODULES:
        raise PickleRefused(
            f"refusing global {module}.{name}: its module can run code or reach the system"
        )
    return Placeholder(module, name)


class NamespaceRecord:
    """argparse.Namespace as a record: its fields, set once by BUILD, kept as a dict."""

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}

    def __setstate__(self, state: Any) -> None:
        """Kept, not copied or walked: a pickle may BUILD many Namespaces from one memoized
        dict, and the work per BUILD must not grow with it (its names are checked once,
        on the Namespace the pickle returns)."""
        if not isinstance(state, dict):
            raise PickleRefused("argparse.Namespace state is not a dict")
        self.fields = state


# The one global an `args` pickle builds (scripts/pickle_budget.py measures its cost)
NAMESPACE_TABLE: dict[tuple[str, str], object] = {("argparse", "Namespace"): NamespaceRecord}


def archive_pickle(raw: bytes, where: str) -> tuple[zipfile.ZipFile, bytes]:
    """The checked torch.save archive in `raw` and its `data.pkl`."""
    if len(raw) > MAX_SAVED_OBJECT_BYTES:
        raise CheckpointFormatError(
            f"{where}: {len(raw)} bytes, more than the {MAX_SAVED_OBJECT_BYTES} read here"
        )
    archive = open_blob(io.BytesIO(raw), len(raw), where)
    return archive, blob_pickle(archive, where)


def _loads(
    data: bytes,
    where: str,
    allowed: dict[tuple[str, str], object],
    records: tuple[type, ...] = (),
    *,
    budget: int,
    persistent_load: Callable[[Any], Any] | None = None,
    placeholders: PlaceholderPolicy | None = None,
) -> Any:
    """`restricted_loads` with its failures as one CheckpointFormatError naming `where`: a
    refusal (policy, budget) says why, damaged bytes name pickle's own error."""
    try:
        return restricted_loads(
            data,
            allowed,
            records,
            budget=budget,
            persistent_load=persistent_load,
            placeholders=placeholders,
        )
    except PickleRefused as err:
        raise CheckpointFormatError(f"{where}: {err}") from None
    except Exception as err:  # damaged bytes: pickle's own error types
        reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
        raise CheckpointFormatError(
            f"{where}: unreadable pickle ({error_line(err, limit=DETAIL_CHARS)})"
        ) from None


def load_namespace(raw: bytes, where: str) -> dict[str, Any] | None:
    """The fields of the argparse.Namespace torch.save'd in `raw`, as a dict; None when
    `raw` holds None (no record of the arguments, which Megatron-LM reads as such)."""
    _archive, data = archive_pickle(raw, where)
    value = _loads(
        data,
        where,
        NAMESPACE_TABLE,
        (NamespaceRecord,),
        budget=NAMESPACE_BUDGET,
        placeholders=args_placeholder,
    )
    if value is None:
        return None
    if not isinstance(value, NamespaceRecord):
        raise CheckpointFormatError(
            f"{where}: holds a {type(value).__name__}, not an argparse.Namespace"
        )
    if not all(isinstance(name, str) for name in value.fields):
        raise CheckpointFormatError(f"{where}: argparse.Namespace state is not a dict of names")
    return value.fields


def load_plain(raw: bytes, where: str) -> Any:
    """The value torch.save'd in `raw` when it is plain data (a step number, a string), read
    without torch: a pickle naming any global is refused."""
    _archive, data = archive_pickle(raw, where)
    return _loads(data, where, {}, budget=SCALARS_BUDGET)


def _rebuild_tensor_layout(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> tuple:
    """Stand-in for torch._utils._rebuild_tensor_v2: the tensor's layout as plain data."""
    return storage, offset, size, stride


# The globals a torch.save'd tensor's pickle names, each replaced by a harmless stand-in.
TENSOR_LAYOUT_GLOBALS: dict[tuple[str, str], object] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_layout,
    ("collections", "OrderedDict"): dict,
    **{("torch", name): dtype for name, dtype in dtypes.BY_STORAGE.items()},  # typed storages
}
_SCALAR_FORMATS = {"int64": "<q", "int32": "<i", "float64": "<d", "float32": "<f", "bool": "?"}


def load_scalars(raw: bytes, where: str) -> dict[str, int | float | bool]:
    """A torch.save'd dict of 0-dim tensors (Megatron-Bridge's train state) as plain values."""
    archive, data = archive_pickle(raw, where)
    value = _loads(
        data, where, TENSOR_LAYOUT_GLOBALS, budget=SCALARS_BUDGET, persistent_load=lambda pid: pid
    )
    if not isinstance(value, dict):
        raise CheckpointFormatError(f"{where}: holds a {type(value).__name__}, not a dict")
    records = {info.filename.rsplit("/data/", 1)[-1]: info for info in archive.infolist()}
    return {
        key: _scalar(archive, records, layout, f"{where} [{key}]")
        for key, layout in value.items()
        if isinstance(key, str)
    }


def _scalar(
    archive: zipfile.ZipFile, records: dict[str, zipfile.ZipInfo], layout: Any, where: str
) -> int | float | bool:
    try:
        (kind, dtype, key, _location, _numel), offset, size, _stride = layout
    except (TypeError, ValueError):
        raise CheckpointFormatError(f"{where}: not a tensor") from None
    fmt = _SCALAR_FORMATS.get(getattr(dtype, "name", ""))
    if kind != "storage" or fmt is None or size != () or not isinstance(offset, int):
        raise CheckpointFormatError(f"{where}: not a 0-dim number tensor")
    info = records.get(str(key))
    width = struct.calcsize(fmt)
    if info is None or not 0 <= offset * width <= info.file_size - width:
        raise CheckpointFormatError(f"{where}: its storage record is missing or too short")
    data = read_member(archive, info)
    return struct.unpack_from(fmt, data, offset * width)[0]


__all__ = [
    "ENUM_LOOKUPS",
    "MAX_SAVED_OBJECT_BYTES",
    "TENSOR_LAYOUT_GLOBALS",
    "archive_pickle",
    "load_namespace",
    "load_plain",
    "load_scalars",
]
