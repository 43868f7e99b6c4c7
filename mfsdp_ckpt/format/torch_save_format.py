"""The bytes `torch.save` and DCP's `.metadata` consist of, written without importing torch.

Import moves gigabytes that keep their values: a tensor's bytes go from the safetensors
file to the DCP data file unchanged (only framed, or reordered by whole rows for the mcore
QKV). Importing torch to frame them is a start-up cost on the order of copying a small
model (bench/export_hf.py's "start-up + import torch" row); and `torch.save` needs the
tensor in memory, where the kernel could copy the bytes file to file. So the two formats are
written here directly:

* a `torch.save` blob of one tensor is a ZIP (stored, no compression) of `data.pkl` (a
  protocol-2 pickle of `torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False,
  OrderedDict())`, or `_rebuild_tensor_v3` with the dtype for those without a typed
  storage class, the storage a persistent id), the raw bytes as `data/0` at a 64-byte
  aligned offset, and torch's small `byteorder`, `version`, `.format_version`,
  `.storage_alignment`, `.data/serialization_id` records. The payload's CRC is 0, as
  `torch.save` writes it with `set_crc32_options(False)` (`torch.load` does not check it,
  and computing it would mean reading every byte); the small records carry real CRCs,
  which Python's zipfile checks when the offline reader looks at `data.pkl`;
* `.metadata` is DCP's `Metadata` pickled as FileSystemWriter pickles it; the objects are
  `dcp_metadata`'s stand-ins, written under DCP's class names (`DcpMetadataPickler`).

tests/ckpt/test_torch_save_format.py holds both to torch: `torch.load` of a blob equals the
tensor, and the unpickled `.metadata` equals the one `dcp.save` writes field for field.
"""

from __future__ import annotations

import copyreg
import enum
import io
import math
import pickle
import secrets
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from mfsdp_ckpt.format import dcp_metadata
from mfsdp_ckpt.format.dtypes import DType

ALIGNMENT = 64  # torch's record alignment (its `.storage_alignment`)
MAX_BLOB_BYTES = (1 << 32) - (
    1 << 16
)  # beyond this a blob needs ZIP64; callers fall back to torch.save
_PREFIX = "archive/"
_DOS_DATE = 0x21  # 1980-01-01, what torch writes


def _pickle_int(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if -(2**31) <= value < 2**31:
        return b"J" + struct.pack("<i", value)
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _pickle_str(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _pickle_tuple(values: Sequence[int]) -> bytes:
    return b"(" + b"".join(_pickle_int(v) for v in values) + b"t"


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides torch gives a contiguous tensor of `shape`: what torch.save records for
    one, and so what the reader expects of a blob it reads without unpickling."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def tensor_pickle(dtype: DType, shape: Sequence[int]) -> bytes:
    """`data.pkl` of a contiguous CPU tensor whose storage is record `data/0`. A dtype with a
    typed storage class (`FloatStorage`) is rebuilt as torch writes it, by
    `_rebuild_tensor_v2`; one without (fp8, fp4, uint16: torch.save writes those as
    `_rebuild_tensor_v3` over an `UntypedStorage` of bytes, the dtype an argument) as that."""
    numel = math.prod(shape)
    typed = dtype.storage is not None
    return b"".join(
        (
            b"\x80\x02ctorch._utils\n",
            b"_rebuild_tensor_v2\n((" if typed else b"_rebuild_tensor_v3\n((",
            _pickle_str("storage"),
            f"ctorch\n{dtype.storage}\n".encode() if typed else b"ctorch.storage\nUntypedStorage\n",
            _pickle_str("0"),
            _pickle_str("cpu"),
            _pickle_int(numel if typed else numel * dtype.itemsize),
            b"tQ",
            _pickle_int(0),
            _pickle_tuple(shape),
            _pickle_tuple(contiguous_strides(shape)),
            b"\x89ccollections\nOrderedDict\n)R",
            b"tR." if typed else f"ctorch\n{dtype.name}\ntR.".encode(),
        )
    )


class BlobLayout:
    """A torch.save ZIP around a payload written by the caller: `head` goes first, the
    payload (`payload_bytes` long) at `payload_offset`, `tail` right after it."""

    def __init__(self, data_pkl: bytes, payload_bytes: int | None):
        records = [
            ("data.pkl", data_pkl),
            (".format_version", b"1"),
            (".storage_alignment", b"64"),
            ("byteorder", b"little"),
        ]
        after = [("version", b"3\n"), (".data/serialization_id", _serialization_id())]
        head, entries = bytearray(), []
        for name, data in records:
            entries.append(_local_record(head, name, data, len(data)))
        self.payload_offset = None
        if payload_bytes is not None:
            entries.append(_local_record(head, "data/0", b"", payload_bytes))
            self.payload_offset = len(head)
        self.head = bytes(head)
        tail, base = bytearray(), len(head) + (payload_bytes or 0)
        for name, data in after:
            entry = _local_record(tail, name, data, len(data), base)
            entries.append(entry)
        directory_offset = base + len(tail)
        directory = b"".join(_central_record(*entry) for entry in entries)
        tail += directory
        tail += struct.pack(
            "<IHHHHIIH",
            0x06054B50,
            0,
            0,
            len(entries),
            len(entries),
            len(directory),
            directory_offset,
            0,
        )
        self.tail = bytes(tail)
        self.length = base + len(tail)


def _serialization_id() -> bytes:
    return str(secrets.randbits(128)).zfill(40)[:40].encode()


def _local_record(
    out: bytearray, name: str, data: bytes, size: int, base: int = 0
) -> tuple[str, int, int, int]:
    """Append a stored record's local header (padded so its data starts 64-aligned, counted
    from the blob's start: `base` + len(out)) and `data`.
    Returns (name, size, header offset, crc)."""
    full = (_PREFIX + name).encode()
    offset = base + len(out)
    unpadded = offset + 30 + len(full)
    padding = -(unpadded + 4) % ALIGNMENT + 4  # an extra field is at least its 4-byte header
    extra = struct.pack("<HH", 0x4246, padding - 4) + b"Z" * (
        padding - 4
    )  # torch's "FB" padding field
    crc = (
        zlib.crc32(data) if data else 0
    )  # the payload's is left 0: nothing reads it as a ZIP member
    out += struct.pack(
        "<IHHHHHIIIHH", 0x04034B50, 0, 0, 0, 0, _DOS_DATE, crc, size, size, len(full), len(extra)
    )
    out += full + extra + data
    return full.decode(), size, offset, crc


def _central_record(name: str, size: int, offset: int, crc: int) -> bytes:
    raw = name.encode()
    return (
        struct.pack(
            "<IHHHHHHIIIHHHHHII",
            0x02014B50,
            0,
            0,
            0,
            0,
            0,
            _DOS_DATE,
            crc,
            size,
            size,
            len(raw),
            0,
            0,
            0,
            0,
            0,
            offset,
        )
        + raw
    )


def object_blob(value: Any) -> bytes:
    """`torch.save(value)` of a plain Python value (a float, an int): the pickle alone."""
    layout = BlobLayout(pickle.dumps(value, protocol=2), None)
    return layout.head + layout.tail


# ----------------------------------------------------------------------------- .metadata
class Size(tuple):
    """A shape or offset that DCP keeps as `torch.Size` (pickled as one)."""


class _Global:
    """A module-level name written into a pickle as is (never imported here)."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args: Any) -> Any:  # the pickler asks that a reduce function be callable
        raise TypeError(f"{self.module}.{self.name} is only a name to pickle")


_TORCH_SIZE = _Global("torch", "Size")
_GET_LAYOUT = _Global("torch.serialization", "_get_layout")
_DCP_CLASSES: dict[type, _Global] = {
    cls: _Global("torch.distributed.checkpoint.metadata", cls.__name__)
    for cls in (
        dcp_metadata.Metadata,
        dcp_metadata.TensorStorageMetadata,
        dcp_metadata.TensorProperties,
        dcp_metadata.ChunkStorageMetadata,
        dcp_metadata.BytesStorageMetadata,
        dcp_metadata.MetadataIndex,
        dcp_metadata.StorageMeta,
        dcp_metadata.MemFormatEncoding,
    )
}
_DCP_CLASSES[dcp_metadata.StorageInfo] = _Global(
    "torch.distributed.checkpoint.filesystem", "_StorageInfo"
)


class DcpMetadataPickler(pickle._Pickler):
    """Pickles `dcp_metadata` objects as DCP's own classes, dtypes as `torch.<name>`.

    The pure-Python pickler is used because its `save_global` can be told a name without
    importing the module (the C pickler would import torch to check it)."""

    # pickle._Pickler's own methods; typeshed does not declare them (nor copyreg.__newobj__).
    write: Callable[[bytes], Any]
    memoize: Callable[[Any], None]

    def __init__(self, file: io.BufferedIOBase):
        super().__init__(file, protocol=2)

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Size):
            return (_TORCH_SIZE, (tuple(obj),))
        if isinstance(obj, (DType, _Global)):
            return obj.name  # written as a global by save_global
        if isinstance(obj, dcp_metadata.TensorProperties):  # DCP's __getstate__ is this tuple
            layout = (_GET_LAYOUT, (obj.layout or "torch.strided",))
            state = (
                obj.dtype,
                _Reduced(*layout),
                obj.requires_grad,
                obj.memory_format,
                obj.pin_memory,
            )
            return (copyreg.__newobj__, (type(obj),), state)  # type: ignore[attr-defined]
        if isinstance(obj, dcp_metadata.StorageInfo):  # DCP leaves None fields out
            return (
                copyreg.__newobj__,  # type: ignore[attr-defined]
                (type(obj),),
                {k: v for k, v in vars(obj).items() if v is not None},
            )
        if isinstance(obj, _Reduced):
            return (obj.func, obj.args)
        if isinstance(obj, enum.Enum):
            return _enum_member(obj)
        return NotImplemented

    def save_global(self, obj: Any, name: str | None = None) -> None:
        target = obj if isinstance(obj, _Global) else _DCP_CLASSES.get(obj)
        if isinstance(obj, DType):
            target = _Global("torch", obj.name)
        if target is None:
            raise pickle.PicklingError(f"{obj!r} has no DCP name")
        self.write(f"c{target.module}\n{target.name}\n".encode())
        self.memoize(obj)


def _enum_member(member: enum.Enum) -> tuple:
    """An enum member (DCP's `_MEM_FORMAT_ENCODING`) as `cls(value)`, spelt out because
    Enum's own reducer differs by patch release: CPython 3.11.7 gives `cls(value)`, 3.11.2
    (Debian 12's) `getattr(cls, name)`, a global with no DCP name, so `.metadata` could not
    be written there. This way its bytes are the same on every Python."""
    return (type(member), (member.value,))


class _Reduced:
    def __init__(self, func: _Global, args: tuple):
        self.func, self.args = func, args


def tensor_metadata(dtype: DType, shape: Sequence[int]) -> dcp_metadata.TensorStorageMetadata:
    """One whole-tensor entry (a single chunk at offset 0), as a one-rank save records it."""
    properties = dcp_metadata.TensorProperties(dtype=dtype, layout="torch.strided")
    zeros, size = Size([0] * len(shape)), Size(shape)
    return dcp_metadata.TensorStorageMetadata(
        properties, size, [dcp_metadata.ChunkStorageMetadata(offsets=zeros, sizes=size)]
    )


def dump_metadata(metadata: dcp_metadata.Metadata) -> bytes:
    out = io.BytesIO()
    DcpMetadataPickler(out).dump(metadata)
    return out.getvalue()
