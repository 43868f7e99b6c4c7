"""Non-tensor entries whose pickle torch's own DCP load would run as code.

DCP stores each non-tensor value (`extra.*`, optimizer param_groups, Megatron-LM's `args`
and `rng_state`, a scheduler's state) as a torch.save blob, and torch's stock load
(`DefaultLoadPlanner.load_bytes`) reads it with `torch.load(weights_only=False)`: whatever
the pickle calls runs, in verl, Megatron-LM or torchtitan. mfsdp never loads such a blob
that way (its decode is weights-only, or the restricted unpickler), so nothing here runs
either: each blob's `data.pkl` is read as opcodes (`restricted_pickle.pickle_globals`)
and the globals it calls are judged by name.

A call is harmless when torch's weights-only loader admits the global (`TORCH_ADMITTED`:
tensors, storages, dtypes, OrderedDict, ...) or it builds a data type real checkpoints
hold that torch does not admit by default (`CHECKPOINT_DATA`: Megatron-LM's
argparse.Namespace, numpy's RNG state arrays, partials, Megatron-core's enums), and so
is the lookup by one int of a member of an enum class of `saved_objects.ENUM_LOOKUPS`
(`signal.Signals(15)`: Megatron-LM's `exit_signal`). Any other call, a call of a computed
callable, a global the pickle computes, a write into a global object (an enum member
included), or a mere reference to a global of the modules that reach the operating system
or the interpreter (`saved_objects`' list, which Megatron args are read under too) is code
a stock load runs: an error. A call shaped like an enum member's pickle (a class called
with one int or str) or an object rebuilt without its `__init__` (NEWOBJ: a dataclass, a
plain object) of an unknown class is a warning, the class not being imported here to tell
whether it holds code of its own (in Megatron-LM's `args`, which holds enums of its own
classes, taken as the Namespace reader takes it, as an enum member). Python 2's names
(`__builtin__.set`) are read as Python 3's, as every unpickler reads them.

validate --deep also decodes each entry whose pickle runs nothing, from the bytes read for
the scan, with the loader that reads it: torch's weights-only load (`blob_decode`: what a
resume, an export and inspect use) where its pickle names only globals torch admits, else
the restricted unpickler, each global an inert placeholder (how Megatron-LM's `args` is
read; its numpy RNG state too, and a torch function torch's load refuses by name, which a
stock load reads). A blob that loader refuses (a damaged pickle, a record its
pickle names but its archive lacks) is an error naming the file and key: the opcode scan
alone passed an `iteration` torch cannot load, where no other check reads it (a bare DCP, a
Megatron step's RNG state).
"""

from __future__ import annotations

import _compat_pickle
import dataclasses
import hashlib
import io
from dataclasses import dataclass
from typing import Any

from mfsdp_ckpt.check.blob_runs import small_blobs
from mfsdp_ckpt.check.object_archives import ArchiveVerdicts, archive_checked
from mfsdp_ckpt.check.printable import error_line
from mfsdp_ckpt.check.report import ERROR, WARNING, ValidationReport
from mfsdp_ckpt.convert.megatron_record import ARGS_KEY
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import dtypes
from mfsdp_ckpt.format.blob_guard import PICKLE_BUDGET, blob_pickle, open_blob
from mfsdp_ckpt.format.restricted_pickle import (
    DETAIL_CHARS,
    GlobalUse,
    PickleRefused,
    Placeholder,
    PlaceholderCall,
    pickle_globals,
    restricted_loads,
)
from mfsdp_ckpt.format.saved_objects import (
    ENUM_LOOKUPS,
    NAMESPACE_BUDGET,
    NAMESPACE_TABLE,
    REFUSED_MODULES,
    NamespaceRecord,
    args_placeholder,
)
from mfsdp_ckpt.storage.blob_decode import decode_blob, load_blob
from mfsdp_ckpt.storage.byte_store import CheckpointFileError, RangeFile
from mfsdp_ckpt.storage.reader import CheckpointReader, ObjectEntry
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory

# torch's weights-only loader's default globals (torch/_weights_only_unpickler.py,
# `_get_allowed_globals`), those a torch.save of plain values, tensors and parameters names.
_REBUILDS = (
    "_rebuild_parameter",
    "_rebuild_parameter_with_state",
    "_rebuild_qtensor",
    "_rebuild_tensor",
    "_rebuild_tensor_v2",
    "_rebuild_tensor_v3",
    "_rebuild_sparse_tensor",
    "_rebuild_meta_tensor_no_storage",
    "_rebuild_nested_tensor",
    "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_numpy",
    "_rebuild_device_tensor_from_cpu_tensor",
)
_QUANTIZATION_SCHEMES = (
    "tensor_affine",
    "tensor_symmetric",
    "channel_affine",
    "channel_symmetric",
    "channel_affine_float_qparams",
)
TORCH_ADMITTED = frozenset(
    {
        "collections.OrderedDict",
        "collections.Counter",
        "torch.nn.parameter.Parameter",
        "torch.serialization._get_layout",
        "torch.Size",
        "torch.Tensor",
        "torch.device",
        "_codecs.encode",
        "builtins.bytearray",
        "builtins.set",
        "builtins.complex",
        "torch._tensor._rebuild_from_type_v2",
        *(f"torch._utils.{name}" for name in _REBUILDS),
        *(f"torch.{name}" for name in dtypes.BY_STORAGE),
        *(f"torch.{dtype.name}" for dtype in dtypes.BY_NAME.values()),  # as pickled: no aliases
        *(f"torch.per_{scheme}" for scheme in _QUANTIZATION_SCHEMES),
    }
)
# Data types real checkpoints hold that torch's weights-only loader does not admit.
CHECKPOINT_DATA = frozenset(
    {
        "argparse.Namespace",  # Megatron-LM's args
        "functools.partial",  # in args; what it wraps is only named, never called on load
        *(
            f"{numpy}.{name}"  # numpy's RNG state (Megatron-LM's rng_state)
            for numpy in ("numpy.core.multiarray", "numpy._core.multiarray")
            for name in ("_reconstruct", "scalar")
        ),
        *(  # an array at protocol 5: its data an in-band buffer (BYTEARRAY8), its dtype
            f"{numpy}.numeric._frombuffer"  # and shape arguments, as _reconstruct's are
            for numpy in ("numpy.core", "numpy._core")
        ),
        "numpy.ndarray",
        "numpy.dtype",
        "_io.BytesIO",  # Transformer Engine's `_extra_state` (its FP8 metadata, serialized)
        # plain values of the standard library, each rebuilt from its own state
        *(f"builtins.{name}" for name in ("bytes", "frozenset", "slice", "range")),
        *(f"datetime.{name}" for name in ("datetime", "date", "time", "timedelta", "timezone")),
        "collections.deque",
        "collections.defaultdict",  # its default factory is only named, never called on load
        *(f"pathlib.{name}" for name in ("PosixPath", "WindowsPath", "PurePosixPath")),
        "pathlib.PureWindowsPath",
    }
)

MAX_LISTED_ENTRIES = 5  # entries named one a line; the rest counted in one more line
MAX_NAMED_CALLS = 3  # callables named per entry
MAX_SCANNED_BLOB_BYTES = 64 << 20  # a transformed blob is decoded whole to reach its pickle


@dataclass(frozen=True)
class CodeOnLoad:
    """What a stock torch load of one entry would run: the callables, worst first, and
    whether any of them is more than an enum member's lookup (`severity` ERROR)."""

    calls: tuple[str, ...]
    severity: str

    def named(self) -> str:
        """The first MAX_NAMED_CALLS callables, and how many more."""
        more = len(self.calls) - MAX_NAMED_CALLS
        return ", ".join(self.calls[:MAX_NAMED_CALLS]) + (f" (+{more} more)" if more > 0 else "")

    def message(self) -> str:
        """validate's line."""
        if self.severity == WARNING:
            return (
                f"its pickle rebuilds objects of {self.named()}, whose modules torch's dcp.load"
                " (verl, Megatron-LM) imports on load: enum members or plain objects if those"
                " classes hold no code of their own (not imported here)"
            )
        return (
            f"its pickle calls {self.named()}, which torch's dcp.load (verl, Megatron-LM)"
            " would run on load (not run here)"
        )

    def note(self) -> str:
        """inspect's note on the entry."""
        verb = "would call" if self.severity == WARNING else "would execute"
        return f"{verb} {self.named()} when torch loads it"


def _python3_name(name: str) -> str:
    """`name` as a Python 3 unpickler reads it: torch.save's pickle protocol 2 writes
    builtins under Python 2's names (`__builtin__.set`, `__builtin__.xrange`), which pickle
    maps back with its own tables (`fix_imports`, from `_compat_pickle`)."""
    module, _, qualname = name.rpartition(".")
    if not module:  # no module: a global the pickle computes (`UNNAMED`), kept as named
        return name
    if (module, qualname) in _compat_pickle.NAME_MAPPING:
        return ".".join(_compat_pickle.NAME_MAPPING[(module, qualname)])
    return f"{_compat_pickle.IMPORT_MAPPING.get(module, module)}.{qualname}"


def _denied(name: str) -> bool:
    module = name.rpartition(".")[0]
    return any(module == denied or module.startswith(denied + ".") for denied in REFUSED_MODULES)


def _megatron_enum(name: str) -> bool:
    """Megatron-core keeps its enums in modules named `enums` (megatron.core.enums,
    megatron.core.transformer.enums): classes of those hold no other code."""
    parts = name.split(".")
    return parts[0] == "megatron" and "enums" in parts[:-1]


def _enum_lookup(use: GlobalUse) -> bool:
    """A member of an ENUM_LOOKUPS class looked up by one int, or the class named."""
    return use.name in ENUM_LOOKUPS and (use.one_int or not use.called)


def _enum_shaped(use: GlobalUse) -> bool:
    module, _, qualname = use.name.rpartition(".")
    return use.one_scalar and qualname.lstrip("_")[:1].isupper() and module != "builtins"


def code_on_load(uses: list[GlobalUse], args: bool = False) -> CodeOnLoad | None:
    """What of `uses` (one pickle's globals) a stock torch load would run, or None. `args`:
    the pickle is Megatron-LM's `args`, whose enums of its own classes are read as such
    (`saved_objects`' Namespace policy), not warned of."""
    errors: list[str] = []
    warnings: list[str] = []
    for use in (dataclasses.replace(use, name=_python3_name(use.name)) for use in uses):
        harmless = use.name in TORCH_ADMITTED or use.name in CHECKPOINT_DATA or _enum_lookup(use)
        rebuilt = (_enum_shaped(use) or use.instance) and not _denied(use.name)
        if use.built_into:
            errors.append(f"a write into {use.name}")
        elif use.called and not harmless and not _megatron_enum(use.name):
            if not rebuilt:
                errors.append(use.name)
            elif not args:
                warnings.append(use.name)
        elif not use.called and not harmless and (_denied(use.name) or use.name.startswith("<")):
            errors.append(use.name)
    found = list(dict.fromkeys(errors + warnings))
    if not found:
        return None
    return CodeOnLoad(tuple(found), ERROR if errors else WARNING)


def entry_pickle(
    reader: CheckpointReader, entry: ObjectEntry, where: str, raw: bytes | None = None
) -> bytes:
    """The `data.pkl` of one non-tensor entry's blob (`raw`: its bytes, when the caller
    read them already), within blob_guard's limits: a large blob (one holding tensors) is
    read only as far as its zip directory and that member, a transformed one decoded whole
    first (up to MAX_SCANNED_BLOB_BYTES)."""
    if entry.file is None:
        raise CheckpointFormatError(f"{where}: no storage entry")
    if entry.transforms:
        if entry.length > MAX_SCANNED_BLOB_BYTES:
            raise CheckpointFormatError(
                f"{where}: {entry.length:,} stored bytes, more than the"
                f" {MAX_SCANNED_BLOB_BYTES:,} decoded here"
            )
        if raw is None:
            raw = reader.store.read_range(entry.file, entry.file_offset, entry.length)
        blob = decode_blob(raw, entry.transforms, where, MAX_SCANNED_BLOB_BYTES)
        return blob_pickle(open_blob(blob, len(blob.getbuffer()), where), where)
    if raw is not None:
        return blob_pickle(open_blob(io.BytesIO(raw), entry.length, where), where)
    blob_file = RangeFile(reader.store, entry.file, entry.file_offset, entry.length)
    return blob_pickle(open_blob(blob_file, entry.length, where), where)


def entry_code_on_load(
    reader: CheckpointReader, entry: ObjectEntry, raw: bytes | None = None
) -> CodeOnLoad | None:
    """`code_on_load` of one entry's pickle (`raw` as `entry_pickle`'s);
    CheckpointFormatError (or CheckpointFileError) when its blob cannot be read that far."""
    where = f"{reader.root / (entry.file or '?')} [{entry.name}]"
    data = entry_pickle(reader, entry, where, raw)
    try:
        return code_on_load(pickle_globals(data), args=entry.name == ARGS_KEY)
    except PickleRefused as err:
        raise CheckpointFormatError(f"{where}: {err}") from None


def _judged(
    reader: CheckpointReader,
    entry: ObjectEntry,
    raw: bytes | CheckpointFileError | None,
    seen: dict[tuple, tuple[str, str] | None],
    archives: ArchiveVerdicts | None = None,
) -> tuple[str, str] | None:
    """(severity, message) of one entry's finding, or None: what its pickle would run, or
    why it could not be checked; with `archives` (validate --deep), why its value cannot be
    read (`decode_problem`) where its pickle runs nothing and it is a whole archive (one
    that is not is reported once, by the archive check; one a check before could not read,
    the step's, once by that check). Blobs of equal bytes get one verdict (`seen`): a DCP
    save writes equal values as equal blobs, and Megatron's distributed optimizer saves ~20
    small settings per parameter (`param_to_group_meta`), tens of thousands of blobs of a
    few distinct values."""
    key = None
    said = reader.decoded.unreadable_said(entry.name)  # by the check that read it
    if isinstance(raw, bytes) and not said:  # by digest: one per distinct blob, not its bytes
        key = (hashlib.sha256(raw).digest(), entry.transforms, entry.name == ARGS_KEY)
    if key is not None and key in seen:
        return seen[key]
    try:
        if isinstance(raw, CheckpointFileError):
            raise raw
        found = entry_code_on_load(reader, entry, raw)
        verdict = None if found is None else (found.severity, found.message())
    except (CheckpointFormatError, CheckpointFileError) as err:
        reason = str(err).split("]: ", 1)[-1]
        verdict = (ERROR, f"pickle not checked for code torch would run ({reason})")
    whole = archives is not None and archives.found.get(entry.name) is None
    if verdict is None and whole and not said and isinstance(raw, bytes):
        problem = decode_problem(reader, entry, raw)
        verdict = None if problem is None else (ERROR, problem)
    if key is not None:
        seen[key] = verdict
    return verdict


def decode_problem(reader: CheckpointReader, entry: ObjectEntry, raw: bytes) -> str | None:
    """Why the entry's blob (`raw`) cannot be read by the loader that reads it, or None:
    torch's weights-only load (`load_blob`, as a resume, an export and inspect read it)
    where its pickle names only globals torch admits, else the restricted unpickler with
    each global an inert placeholder (`_inert`), as Megatron-LM's `args` is read. That
    reader may retain what the scan let the pickle retain (PICKLE_BUDGET), `args` what
    Megatron's args are read under (NAMESPACE_BUDGET): a sampler's intact numpy
    permutation past the args' budget, passed by the scan, was "cannot be read"."""
    where = f"{reader.root / (entry.file or '?')} [{entry.name}]"
    try:
        if not torch_refuses(reader, entry, raw) and not _torch_cannot_read(raw, entry, where):
            return None
        restricted_loads(
            entry_pickle(reader, entry, where, raw),
            NAMESPACE_TABLE,
            (NamespaceRecord,),
            budget=NAMESPACE_BUDGET if entry.name == ARGS_KEY else PICKLE_BUDGET,
            persistent_load=lambda pid: pid,  # a tensor's record is named, never read
            placeholders=_inert,
        )
    except (CheckpointFormatError, CheckpointFileError) as err:
        return f"its value cannot be read ({str(err).split(']: ', 1)[-1]})"
    except PickleRefused as err:
        if PlaceholderCall.__name__ in str(err):  # items added to an object it keeps as a
            return None  # name (a deque, a defaultdict): built by a stock load, not here
        return f"its value cannot be read by the restricted reader ({err})"
    except Exception as err:  # damaged bytes: pickle's own error types
        reraise_if_out_of_memory(err)  # the machine's limit, not the blob's fault
        line = error_line(err, limit=DETAIL_CHARS)
        return f"its value cannot be read by the restricted reader (damaged pickle: {line})"
    return None


def _torch_cannot_read(raw: bytes, entry: ObjectEntry, where: str) -> bool:
    """Whether torch's weights-only load, which reads the blob (`load_blob`), stops at an
    opcode it does not implement (a pickle of protocol 4 or 5, as Megatron-LM's converter
    writes: "Unsupported operand 149", its FRAME) or at a global it does not admit (a torch
    function: `torch._C._nn.gelu`), not at damage: such a blob is judged by the restricted
    unpickler instead, which reads every protocol and takes every global the scan passed
    as an inert placeholder, as a stock load reads it. Judged by torch, a function beside
    an int was "cannot be read" and the same function beside a numpy value valid. Any
    other refusal is raised (CheckpointFormatError)."""
    try:
        load_blob(raw, entry.transforms, where, MAX_SCANNED_BLOB_BYTES)
    except CheckpointFormatError as err:
        if not any(said in str(err) for said in _NOT_DAMAGE):
            raise
        return True
    return False


# torch's weights-only unpickler's own words (the second as `torch_load_reason` puts them)
_NOT_DAMAGE = ("Unsupported operand", "refusing to load global ")


def _inert(module: str, name: str) -> Placeholder:
    """A global of a pickle torch refuses, as the restricted reader takes it: a data type of
    CHECKPOINT_DATA or TORCH_ADMITTED an inert placeholder, any other as in Megatron's
    `args` (`args_placeholder`: refused where its module runs code or reaches the system)."""
    if _python3_name(f"{module}.{name}") in TORCH_ADMITTED | CHECKPOINT_DATA:
        return Placeholder(module, name)
    return args_placeholder(module, name)


def check_object_pickles(
    reader: CheckpointReader,
    report: ValidationReport,
    lost: dict[str, str],
    archives: ArchiveVerdicts | None = None,
) -> None:
    """One finding per entry whose pickle a stock torch load would run code from, or whose
    pickle could not be checked (then nobody can say it is safe to hand to torch): the
    first MAX_LISTED_ENTRIES by name, the rest counted in one more. Entries without storage
    or in the `lost` data files are left to the checks that report those once. Small blobs
    are read a run of neighbours at a time and judged as they come, so memory holds one
    run and the distinct verdicts, not every blob. `archives` (validate --deep): each blob
    read is also checked as an archive (`object_archives`) from the same bytes, a larger
    one read whole for both, so --deep reads no non-tensor byte twice."""
    entries = [
        e for _, e in sorted(reader.objects.items()) if e.file is not None and e.file not in lost
    ]
    seen: dict[tuple, tuple[str, str] | None] = {}
    verdicts = {}
    for entry, raw in small_blobs(reader, entries):
        if archives is not None and archive_checked(entry):
            archives.add(entry, raw)
        verdicts[entry.name] = _judged(reader, entry, raw, seen, archives)
    findings: list[tuple[str, str, str]] = []
    for entry in entries:
        verdict = (
            verdicts[entry.name]
            if entry.name in verdicts
            else _judged(reader, entry, _whole_for(reader, entry, archives), seen, archives)
        )
        if verdict is not None:
            where = f"{reader.root / (entry.file or '?')} [{entry.name}]"
            findings.append((verdict[0], where, verdict[1]))
    for severity, where, message in findings[:MAX_LISTED_ENTRIES]:
        report.add(severity, where, message)
    rest = findings[MAX_LISTED_ENTRIES:]
    if rest:
        severity = ERROR if any(f[0] == ERROR for f in rest) else WARNING
        report.add(
            severity,
            reader.root,
            f"(+{len(rest)} more non-tensor entries whose pickles torch would run code from"
            " or whose values cannot be read)",
        )


def _whole_for(
    reader: CheckpointReader, entry: ObjectEntry, archives: ArchiveVerdicts | None
) -> bytes | CheckpointFileError | None:
    """A larger blob's bytes, read whole once with `archives` (validate --deep: decoded, and
    checked as an archive too where `archive_checked`) up to MAX_SCANNED_BLOB_BYTES; else
    None, and the pickle check reads only its zip directory and pickle."""
    if archives is None or entry.length > MAX_SCANNED_BLOB_BYTES:
        return None
    raw: bytes | CheckpointFileError
    try:
        raw = reader.store.read_range(entry.file or "", entry.file_offset, entry.length)
    except CheckpointFileError as err:
        raw = err
    if archive_checked(entry):
        archives.add(entry, raw)
    return raw


def torch_refuses(reader: CheckpointReader, entry: ObjectEntry, raw: bytes) -> bool:
    """Whether torch's weights-only load refuses the entry's blob (`raw`) for a global its
    pickle names outside torch's namespace that torch does not admit (numpy's RNG state, a
    Namespace): told from the names, without importing torch. False where the pickle cannot
    be read so far: torch's load says what it makes of it."""
    where = f"{reader.root / (entry.file or '?')} [{entry.name}]"
    try:
        uses = pickle_globals(entry_pickle(reader, entry, where, raw))
    except (CheckpointFormatError, CheckpointFileError, PickleRefused):
        return False
    return any(_outside_torch(_python3_name(use.name)) for use in uses)


def _outside_torch(name: str) -> bool:
    """A global torch's weights-only loader refuses by default: not one it admits, and of
    no torch module (those it may admit are left to its load)."""
    return name not in TORCH_ADMITTED and name.split(".", 1)[0] != "torch"


def restricted_plain_value(
    reader: CheckpointReader, entry: ObjectEntry, raw: bytes | None = None
) -> tuple[Any] | None:
    """(value,) of an entry whose blob torch's weights-only load cannot read (an opcode it
    does not implement: a pickle of protocol 3-5) that the restricted unpickler reads as
    plain data, naming no global and no storage, as a stock load builds it; None when it
    reads no such value. `raw`: the entry's bytes, when the caller read them already."""
    where = f"{reader.root / (entry.file or '?')} [{entry.name}]"
    try:
        return (
            restricted_loads(entry_pickle(reader, entry, where, raw), {}, budget=PICKLE_BUDGET),
        )
    except Exception as err:  # refused, or damaged: pickle's own error types
        reraise_if_out_of_memory(err)  # the machine's limit, not the blob's fault
        return None


def refused_decode_note(
    reader: CheckpointReader, entry: ObjectEntry, raw: bytes | None = None
) -> str:
    """Why inspect shows an entry the restricted reader refused as opaque: what a stock
    torch load would run from it when it would run anything, else the refusal itself.
    `raw`: the entry's bytes, when the caller read them already."""
    try:
        found = entry_code_on_load(reader, entry, raw)
    except (CheckpointFormatError, CheckpointFileError):
        found = None
    if found is None:
        return "holds types the restricted reader refuses"
    return found.note()
