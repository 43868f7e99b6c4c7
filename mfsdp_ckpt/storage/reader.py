"""Offline reader for DCP checkpoints: no process group, no GPU, no code execution.

It turns `.metadata` into a plain table of tensors (name, global shape, dtype, chunks)
and reads one full tensor at a time by stitching its chunks, so memory stays bounded by
the largest tensor whatever the model size. It reads what torch FSDP2 writes (even
shards) and what Megatron-FSDP writes (uneven shards, empty local shards), as well as
Megatron-core's fsdp_dtensor checkpoints.

The tables (and everything export plans from them) need no torch: dtypes are
`mfsdp_ckpt.format.dtypes` records. torch is imported only to decode a blob into a tensor
(`read_chunk`, `read_tensor`, `read_object`), so a caller that only copies raw bytes
(`raw_payload_offset`) never pays for its import.
"""

from __future__ import annotations

import io
import math
import os
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, BinaryIO, NamedTuple, cast

from mfsdp_ckpt.check.printable import cut_to, torch_load_reason
from mfsdp_ckpt.errors import CheckpointFormatError, UnsafeMetadataError
from mfsdp_ckpt.format import dcp_metadata, dtypes
from mfsdp_ckpt.format.blob_guard import blob_pickle, open_blob
from mfsdp_ckpt.format.dcp_metadata import (
    MAX_INT,
    MAX_METADATA_BYTES,
    READ_BUFFER_BYTES,
    load_plain_metadata_file,
)
from mfsdp_ckpt.format.layout import DCP_METADATA_FILE
from mfsdp_ckpt.format.restricted_pickle import DETAIL_CHARS, restricted_loads
from mfsdp_ckpt.format.saved_objects import TENSOR_LAYOUT_GLOBALS
from mfsdp_ckpt.format.torch_save_format import contiguous_strides
from mfsdp_ckpt.format.zip_crc import crc_written, read_member
from mfsdp_ckpt.storage import metadata_handoff
from mfsdp_ckpt.storage.blob_decode import BLOB_OVERHEAD, load_blob
from mfsdp_ckpt.storage.byte_store import ByteStore, CheckpointFileError, LocalByteStore, RangeFile
from mfsdp_ckpt.storage.chunk_checks import (
    PairBudget,
    chunk_backing_problem,
    chunk_coverage_problems,
)
from mfsdp_ckpt.storage.decoded_records import DecodedRecords
from mfsdp_ckpt.storage.held_collector import collector_held
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory, tensor_memory
from mfsdp_ckpt.storage.tensorstore_store import location_root
from mfsdp_ckpt.storage.zip_payload import payload_start

if TYPE_CHECKING:
    import torch

# Any single tensor above this is an absurd shape, not a model weight: refuse before allocating.
MAX_TENSOR_BYTES = 1 << 40


@dataclass(frozen=True)
class Chunk:
    """One stored piece of a tensor: where it sits in the tensor and where its bytes are."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    file: str | None
    file_offset: int
    length: int
    transforms: tuple[str, ...] = ()

    @property
    def numel(self) -> int:
        return math.prod(self.sizes)


@dataclass(frozen=True)
class TensorEntry:
    name: str
    shape: tuple[int, ...]
    dtype: dtypes.DType
    chunks: tuple[Chunk, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass(frozen=True)
class ObjectEntry:
    """A non-tensor value DCP stored as a torch.save blob (ints, RNG tuples, configs)."""

    name: str
    file: str | None
    file_offset: int
    length: int
    transforms: tuple[str, ...] = ()


class RawPayload(NamedTuple):
    """A chunk's raw bytes in its data file: where they start, the CRC written for them
    (None: none written), and the name of the zip record that holds them."""

    offset: int
    crc: int | None
    record: str


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)):  # torch.Size is a tuple
        raise CheckpointFormatError(
            f"{what}: expected a sequence of ints, got {type(value).__name__}"
        )
    items = tuple(value)
    if len(items) > 64 or not _all_indices(items):
        raise CheckpointFormatError(
            f"{what}: expected at most 64 ints in [0, 2**63), got {cut_to(repr(items), 200)}"
        )
    return items


def _nonneg_int(value: Any, what: str) -> int:
    if not _is_index(value):
        raise CheckpointFormatError(
            f"{what}: expected an int in [0, 2**63), got {cut_to(repr(value), 200)}"
        )
    return value


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT


_PLAIN_INT = {int}


def _all_indices(items: tuple) -> bool:
    """Whether every item `_is_index`: decided in C for a tuple of plain ints (every shape and
    offset of a checkpoint, several per entry), item by item for anything else."""
    if not items:
        return True
    if set(map(type, items)) == _PLAIN_INT:
        return min(items) >= 0 and max(items) <= MAX_INT
    return all(_is_index(v) for v in items)


def _located(storage_data: dict) -> dict[tuple[str, Any], Any]:
    """`storage_data` keyed by each MetadataIndex's (fqn, offset), the pair it is equal and
    hashed by: every entry is then found by a tuple, no index record built per lookup."""
    return {
        (index.fqn, index.offset): info
        for index, info in storage_data.items()
        if isinstance(index, dcp_metadata.MetadataIndex)
    }


def _storage_location(
    located: dict[tuple[str, Any], Any], key: str, offsets: tuple[int, ...] | None
) -> tuple[str | None, int, int, tuple]:
    info = located.get((key, offsets))
    if info is None:
        return None, 0, 0, ()
    relative_path = getattr(info, "relative_path", None)
    if not isinstance(relative_path, str):
        raise CheckpointFormatError(f"{key}: storage entry has no file name")
    offset = _nonneg_int(getattr(info, "offset", None), f"{key}: storage offset")
    length = _nonneg_int(getattr(info, "length", None), f"{key}: storage length")
    transforms = getattr(info, "transform_descriptors", None) or ()
    if not transforms:
        return relative_path, offset, length, ()
    if not isinstance(transforms, (list, tuple)) or not all(isinstance(t, str) for t in transforms):
        raise CheckpointFormatError(
            f"{key}: storage transforms {cut_to(repr(transforms), 200)} are not a list of names"
        )
    return relative_path, offset, length, tuple(transforms)


def parse_metadata(
    md: dcp_metadata.Metadata, report: dcp_metadata.CheckReport | None = None
) -> tuple[dict[str, TensorEntry], dict[str, ObjectEntry]]:
    """Normalize DCP metadata into checked, plain tables. Raises on malformed entries.
    Its progress goes to `report` (`CheckSteps`, per chunk)."""
    storage_data = getattr(md, "storage_data", None)
    located = _located(storage_data) if isinstance(storage_data, dict) else {}
    tensors: dict[str, TensorEntry] = {}
    objects: dict[str, ObjectEntry] = {}
    state = md.state_dict_metadata
    steps = dcp_metadata.CheckSteps(report, "tables", dcp_metadata.listed_chunks(state))
    for key, item in state.items():
        if not isinstance(key, str):
            raise CheckpointFormatError(f"state dict key {key!r} is not a string")
        if isinstance(item, dcp_metadata.BytesStorageMetadata):
            location = _storage_location(located, key, None)
            objects[key] = ObjectEntry(key, *location)
            steps.add(1)
            continue
        if not isinstance(item, dcp_metadata.TensorStorageMetadata):
            raise CheckpointFormatError(f"{key}: unknown metadata entry {type(item).__name__}")
        shape = _int_tuple(getattr(item, "size", None), f"{key}: shape")
        dtype = getattr(getattr(item, "properties", None), "dtype", None)
        if not isinstance(dtype, dtypes.DType):
            raise CheckpointFormatError(f"{key}: dtype {dtype!r} is not a torch dtype")
        if math.prod(shape) * dtype.itemsize > MAX_TENSOR_BYTES:
            raise CheckpointFormatError(f"{key}: shape {shape} ({dtype}) is absurdly large")
        stored_chunks = getattr(item, "chunks", None)
        if not isinstance(stored_chunks, (list, tuple)):
            raise CheckpointFormatError(
                f"{key}: chunks are {type(stored_chunks).__name__}, not a list"
            )
        chunks = []
        for chunk in stored_chunks:
            offsets = _int_tuple(getattr(chunk, "offsets", None), f"{key}: chunk offsets")
            sizes = _int_tuple(getattr(chunk, "sizes", None), f"{key}: chunk sizes")
            if len(offsets) != len(shape) or len(sizes) != len(shape):
                raise CheckpointFormatError(
                    f"{key}: chunk rank {len(offsets)}/{len(sizes)} differs from tensor rank "
                    f"{len(shape)}"
                )
            location = _storage_location(located, key, offsets)
            chunks.append(Chunk(offsets, sizes, *location))
        tensors[key] = TensorEntry(key, shape, dtype, tuple(chunks))
        steps.add(len(chunks))
    return tensors, objects


def unclaimed_storage_entries(
    md: dcp_metadata.Metadata, tensors: dict[str, TensorEntry], objects: dict[str, ObjectEntry]
) -> list[tuple[str, str]]:
    """Storage entries that no state-dict entry reads, as (fqn, what is wrong): DCP
    writes both tables from one save plan, so an entry for a key `state_dict_metadata`
    lacks, or at offsets none of its chunks has, is a damaged or edited `.metadata`
    (bytes that every reader ignores, or a chunk whose entry was renamed away)."""
    storage_data = getattr(md, "storage_data", None)
    if not isinstance(storage_data, dict):
        return []
    claimed: set[tuple[str, tuple[int, ...] | None]] = {(key, None) for key in objects}
    claimed.update((key, c.offsets) for key, e in tensors.items() for c in e.chunks)
    problems = []
    for index in storage_data:
        offset = None if index.offset is None else tuple(index.offset)
        if (index.fqn, offset) in claimed:
            continue
        if index.fqn in tensors:
            why = f"storage entry at offsets {offset} matches none of the tensor's chunks"
        elif index.fqn in objects:
            why = f"storage entry at offsets {offset} for a non-tensor entry"
        else:
            why = "storage entry for a key state_dict_metadata does not have"
        problems.append((index.fqn, why))
    return sorted(problems)


def _load_streamed(file: RangeFile, where: str) -> Any:
    """`load_blob` over a ranged file (weights_only too), for a blob `stored_layout` has
    already checked; storage errors keep their message."""
    import torch

    try:
        # A RangeFile is a binary file object; typeshed's IO is nominal.
        return torch.load(cast("IO[bytes]", file), map_location="cpu", weights_only=True)
    except (CheckpointFileError, CheckpointFormatError):
        raise
    except Exception as err:
        cause = err.__context__ if isinstance(err.__context__, CheckpointFileError) else None
        if cause is not None:
            raise cause from None
        reraise_if_out_of_memory(err)  # the machine's limit, not the blob's fault
        raise CheckpointFormatError(f"{where}: {torch_load_reason(err, DETAIL_CHARS)}") from None


_LAYOUT_BUDGET = 64 << 10  # what a tensor's pickle may retain; it is charged ~4 KB


def _tensor_layout(data: bytes) -> tuple | None:
    """(dtype, storage numel, storage offset, size, stride) of a plain tensor pickle, else None.
    Read with the restricted unpickler: data only, a few opcodes, no memo to inflate. Memory
    running out is raised: the machine's, not the pickle's, whose None the caller reads as
    "not the plain layout"."""
    try:
        value = restricted_loads(
            data, TENSOR_LAYOUT_GLOBALS, budget=_LAYOUT_BUDGET, persistent_load=lambda pid: pid
        )
        storage, offset, size, stride = value
        kind, dtype, _key, _location, numel = storage
    except Exception as err:
        reraise_if_out_of_memory(err)  # the machine's limit, not the pickle's fault
        return None
    if kind != "storage" or not isinstance(dtype, dtypes.DType):
        return None
    if not all(isinstance(v, tuple) and all(_is_index(i) for i in v) for v in (size, stride)):
        return None
    if not (_is_index(offset) and _is_index(numel)):
        return None
    return dtype, numel, offset, size, stride


def stored_layout(
    blob: BinaryIO | io.RawIOBase,
    length: int,
    dtype: dtypes.DType,
    sizes: tuple[int, ...],
    where: str,
) -> tuple[tuple, zipfile.ZipInfo] | None:
    """The layout of a chunk's `length`-byte blob and its one data record, checked against
    the metadata's `dtype` and chunk `sizes` before anything is allocated: the dtype it
    holds (int64 bytes under a float32 name are refused, not cast), its shape, and a record
    exactly as large as its storage claims. None when the pickle is not the plain
    one-tensor shape (torch.load then decides, and `check_loaded_chunk` checks its result).
    Every reader of chunks runs it: validate --deep and export through `CheckpointReader`,
    a resume through `safe_dcp` (which would otherwise cast the blob into the parameter)."""
    archive = open_blob(blob, length, where)
    layout = _tensor_layout(blob_pickle(archive, where))
    if layout is None:
        return None
    held, numel, _offset, size, _stride = layout
    if held != dtype:
        raise CheckpointFormatError(f"{where}: blob holds {held} data, metadata says {dtype}")
    if size != sizes:
        raise CheckpointFormatError(f"{where}: chunk holds shape {size}, metadata says {sizes}")
    records = [
        i for i in archive.infolist() if "/data/" in i.filename and not i.filename.endswith("/")
    ]
    if len(records) != 1 or records[0].file_size != numel * held.itemsize:
        raise CheckpointFormatError(
            f"{where}: blob's storage claims {numel} {held} elements but holds"
            f" {sum(r.file_size for r in records)} bytes"
        )
    return layout, records[0]


def check_loaded_chunk(
    value: Any, dtype: dtypes.DType, sizes: tuple[int, ...], where: str
) -> torch.Tensor:
    """`value`, a chunk's loaded blob, when it is a tensor of the metadata's `dtype` and
    chunk `sizes`; else CheckpointFormatError naming `where`. Never cast silently: bytes
    of another dtype mean something else."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise CheckpointFormatError(f"{where}: blob holds {type(value).__name__}, not a tensor")
    if value.dtype != dtype.torch:
        raise CheckpointFormatError(
            f"{where}: blob holds {value.dtype} data, metadata says {dtype}"
        )
    if tuple(value.shape) != sizes:
        raise CheckpointFormatError(
            f"{where}: chunk holds shape {tuple(value.shape)}, metadata says {sizes}"
        )
    return value


# What a reader holds of its `.metadata` once parsed and checked: what it hands on.
_PARSED = ("metadata", "bytes_after_metadata", "tensors", "objects", "sharing")


class CheckpointReader:
    """Tables and values of one DCP directory, read on demand.

    >>> reader = CheckpointReader("run/global_step_10/dist_ckpt")
    >>> entry = reader.tensors["model.embed_tokens.weight"]  # its shape, dtype and chunks
    >>> tensor = reader.read_tensor("model.embed_tokens.weight")
    """

    def __init__(
        self,
        dist_ckpt_dir: str | os.PathLike,
        store: ByteStore | None = None,
        *,
        hand_on: bool = False,
    ):
        """`hand_on`: leave what was parsed to the next reader of the same, unchanged local
        `.metadata` (`metadata_handoff`), for a caller that reads it before the command
        does (layout detection); a local reader takes what was left instead of reading."""
        self.root = location_root(dist_ckpt_dir)  # a URL's `//` kept: messages name it
        self.store = store or LocalByteStore(self.root)
        size = self.store.size(DCP_METADATA_FILE)
        where = str(self.root / DCP_METADATA_FILE)
        if size is None:
            raise CheckpointFileError(f"{where}: file is missing (not a DCP checkpoint)")
        if size > MAX_METADATA_BYTES:  # refused before reading: a sparse file can claim any size
            raise UnsafeMetadataError(
                f"{where}: {size} bytes, more than the {MAX_METADATA_BYTES} DCP metadata may have"
            )
        key = metadata_handoff.identity(where) if store is None else None
        parsed = metadata_handoff.take(key)
        if parsed is None:
            self._parse(size, where)
        else:  # the same objects: nothing reads them but to look (no reader changes them)
            vars(self).update(parsed)
        if hand_on and key is not None and key == metadata_handoff.identity(where):
            metadata_handoff.leave(key, {name: getattr(self, name) for name in _PARSED})
        self._pairs = PairBudget()  # every tensor's coverage check draws on it
        self._coverage: dict[str, list[str]] = {}
        self._sizes: dict[str, int | None] = {}  # data file -> its size: see _file_size
        # records several checks of one command read (Megatron-LM's args): decoded once
        self.decoded = DecodedRecords()

    def _parse(self, size: int, where: str) -> None:
        """Read and check `.metadata` (`size` bytes) into this reader's tables, the cycle
        collector held off: all it builds is kept (`held_collector`)."""
        with collector_held():
            self._parse_held(size, where)

    def _parse_held(self, size: int, where: str) -> None:
        # read up to the pickle's STOP only, as torch's reader: bytes after it are not held
        stored = RangeFile(self.store, DCP_METADATA_FILE, 0, size)
        buffered = io.BufferedReader(stored, READ_BUFFER_BYTES)
        # bytes the file holds past the pickle's STOP: torch's reader never reads them
        self.metadata, self.bytes_after_metadata = load_plain_metadata_file(buffered, size, where)
        report = dcp_metadata.check_reporter(where, size)  # seconds of checks for a large one
        try:
            self.tensors, self.objects = parse_metadata(self.metadata, report)
        except CheckpointFormatError as err:
            raise CheckpointFormatError(f"{where}: {err}") from None
        # which entries name one blob (a tied head's alias): any other sharing of bytes is
        # refused here, so no reader (validate, inspect, export) loads one tensor's bytes
        # as another's. Imported here: shared_bytes reads this module's tables.
        from mfsdp_ckpt.storage.shared_bytes import byte_sharing

        self.sharing = byte_sharing(self.tensors, self.objects, report)
        if self.sharing.refused:
            raise CheckpointFormatError(f"{where}: {self.sharing.refusal()}")

    def files(self) -> dict[str, int]:
        """Each data file the metadata refers to, with the bytes it must hold at least."""
        needed: dict[str, int] = {}
        entries: Iterable[Chunk | ObjectEntry] = [
            *(c for e in self.tensors.values() for c in e.chunks),
            *self.objects.values(),
        ]
        for item in entries:
            if item.file is not None:
                needed[item.file] = max(needed.get(item.file, 0), item.file_offset + item.length)
        return needed

    def _where(self, name: str, file: str | None) -> str:
        return f"{self.root / (file or '?')} [{name}]"

    def read_chunk(self, entry: TensorEntry, chunk: Chunk) -> torch.Tensor:
        """One chunk as a tensor, checked against the metadata (dtype, shape); an allocation
        that fails is TensorMemoryError naming it."""
        where = self._where(entry.name, chunk.file)
        if chunk.file is None:
            raise CheckpointFormatError(f"{where}: chunk at {chunk.offsets} has no storage entry")
        with tensor_memory(where, chunk.numel * entry.dtype.itemsize, "reading this chunk"):
            return self._load_chunk(entry, chunk, chunk.file, where)

    def _load_chunk(self, entry: TensorEntry, chunk: Chunk, file: str, where: str) -> torch.Tensor:
        if chunk.transforms:
            raw = self.store.read_range(file, chunk.file_offset, chunk.length)
            value = load_blob(
                raw,
                chunk.transforms,
                where,
                limit=chunk.numel * entry.dtype.itemsize + BLOB_OVERHEAD,
            )
        else:  # stream: the payload lands in the tensor's memory with no second copy
            blob = RangeFile(self.store, file, chunk.file_offset, chunk.length)
            stored_layout(blob, chunk.length, entry.dtype, chunk.sizes, where)
            blob.seek(0)
            value = _load_streamed(blob, where)
        return check_loaded_chunk(value, entry.dtype, chunk.sizes, where)

    def raw_payload_offset(self, entry: TensorEntry, chunk: Chunk) -> int | None:
        """`raw_payload`'s offset alone (where only the bytes are copied, never checked)."""
        found = self.raw_payload(entry, chunk)
        return None if found is None else found.offset

    def raw_payload(self, entry: TensorEntry, chunk: Chunk) -> RawPayload | None:
        """Where in `chunk.file` the chunk's raw little-endian bytes start, with the CRC its
        writer wrote for them (None: written as 0, unchecked; `zip_crc.crc_written`), when
        its blob holds exactly the chunk as one contiguous, uncompressed storage (what DCP
        writes); else None. A read that passes every byte through memory checks the CRC:
        without a manifest it is the only evidence that the bytes are the ones saved.

        Lets export copy such bytes file-to-file (copy_file_range) with no trip through
        user memory. The blob's pickle is read as data (`_tensor_layout`): which storage,
        offset, shape and strides, never a tensor and never code. A local header that would
        place the bytes outside the blob is refused, CheckpointFormatError (`payload_start`).
        """
        if chunk.transforms or chunk.file is None or chunk.numel == 0:
            return None
        where = self._where(entry.name, chunk.file)
        blob = RangeFile(self.store, chunk.file, chunk.file_offset, chunk.length)
        try:
            stored = stored_layout(blob, chunk.length, entry.dtype, chunk.sizes, where)
            expected = (entry.dtype, chunk.numel, 0, chunk.sizes, contiguous_strides(chunk.sizes))
            if stored is None or stored[0] != expected:
                return None
            record = stored[1]
            archive = zipfile.ZipFile(blob)
            orders = [i for i in archive.infolist() if i.filename.endswith("/byteorder")]
            if orders and read_member(archive, orders[0]) != b"little":
                return None
        except CheckpointFileError:
            raise
        except Exception as err:
            reraise_if_out_of_memory(err)  # the machine's limit, not the blob's fault
            return None  # anything unusual: the caller takes the decoding path, which refuses
        # the raw reads bypass torch's zip reader: its header must place the bytes in the blob
        payload = chunk.numel * entry.dtype.itemsize
        start = chunk.file_offset + payload_start(blob, archive, record, payload, where)
        return RawPayload(start, record.CRC if crc_written(record) else None, record.filename)

    def _check_stored(self, entry: TensorEntry, chunk: Chunk) -> None:
        """A chunk's blob must exist, fit in its file and, uncompressed, hold at least its
        elements' bytes (DCP saves each chunk with its own storage). Checked before the
        output is allocated, so metadata claiming 512 GB over a tiny file costs nothing."""
        where = self._where(entry.name, chunk.file)
        if chunk.file is None:
            raise CheckpointFormatError(f"{where}: chunk at {chunk.offsets} has no storage entry")
        size = self._file_size(chunk.file)
        if size is None:
            raise CheckpointFileError(f"{where}: file is missing")
        if chunk.file_offset + chunk.length > size:
            raise CheckpointFileError(
                f"{where}: needs bytes [{chunk.file_offset}, {chunk.file_offset + chunk.length}) "
                f"but the file has {size} (truncated?)"
            )
        problem = chunk_backing_problem(entry, chunk)
        if problem:
            raise CheckpointFormatError(f"{where}: {problem}")

    def _file_size(self, file: str) -> int | None:
        """A data file's size, asked of the store once per file (each ask opens it and
        resolves its path): `_check_stored` asks per chunk, and a Megatron-FSDP file holds
        thousands. Each read checks the size again as it opens the file, so a file cut after
        the first ask is still refused, naming it."""
        if file not in self._sizes:
            self._sizes[file] = self.store.size(file)
        return self._sizes[file]

    def coverage_problems(self, entry: TensorEntry) -> list[str]:
        """`chunk_coverage_problems` of one of this reader's tensors, worked out once (a
        validate --deep or an export asks again before reading it), all of them drawing on
        the reader's one PairBudget."""
        found = self._coverage.get(entry.name)
        if found is None:
            found = self._coverage[entry.name] = chunk_coverage_problems(entry, self._pairs)
        return found

    def check_readable(self, entry: TensorEntry) -> None:
        """Refuse, before anything of it is read, a tensor whose chunks do not tile it or
        whose blobs cannot hold them (`_check_stored`)."""
        problems = self.coverage_problems(entry)
        if problems:
            where = self.root / DCP_METADATA_FILE
            raise CheckpointFormatError(f"{where} [{entry.name}]: {problems[0]}")
        for chunk in entry.chunks:
            if chunk.numel:
                self._check_stored(entry, chunk)

    def read_tensor(self, name: str) -> torch.Tensor:
        """The full tensor, stitched from its chunks (one chunk in memory at a time beside
        it); an allocation that fails is TensorMemoryError naming it and its bytes."""
        entry = self.tensors.get(name)
        if entry is None:
            raise KeyError(f"{self.root}: no tensor named {name!r}")
        self.check_readable(entry)
        with tensor_memory(f"{self.root} [{name}]", entry.nbytes):
            return self._stitch(entry)

    def _stitch(self, entry: TensorEntry) -> torch.Tensor:
        import torch

        if len(entry.chunks) == 1 and entry.chunks[0].sizes == entry.shape:
            return self.read_chunk(entry, entry.chunks[0]).contiguous()
        out = torch.empty(entry.shape, dtype=entry.dtype.torch)
        for chunk in entry.chunks:
            if chunk.numel == 0:
                continue
            region = out
            for dim, (off, size) in enumerate(zip(chunk.offsets, chunk.sizes)):
                region = region.narrow(dim, off, size)
            region.copy_(self.read_chunk(entry, chunk))
        return out

    def read_object(self, name: str) -> Any:
        raw = self.object_bytes(name)
        entry = self.objects[name]
        return load_blob(raw, entry.transforms, self._where(name, entry.file))

    def object_bytes(self, name: str) -> bytes:
        """The stored bytes of a non-tensor entry, as `read_object` decodes them: for a
        caller that also reads them otherwise (inspect's pickle scan), reading them once."""
        entry = self.objects.get(name)
        if entry is None:
            raise KeyError(f"{self.root}: no object named {name!r}")
        if entry.file is None:
            where = self._where(name, entry.file)
            raise CheckpointFormatError(f"{where}: object has no storage entry")
        return self.store.read_range(entry.file, entry.file_offset, entry.length)


__all__ = [
    "CheckpointFileError",
    "CheckpointFormatError",
    "CheckpointReader",
    "Chunk",
    "ObjectEntry",
    "RawPayload",
    "TensorEntry",
    "UnsafeMetadataError",
]
