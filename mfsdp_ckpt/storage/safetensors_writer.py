"""Write sharded safetensors whose layout is fixed before the first tensor arrives.

safetensors is an 8-byte little-endian header length, a JSON header (name -> dtype,
shape, [begin, end) byte offsets into the data section), then raw little-endian bytes.
Because every name, shape and dtype is known up front, each file's header and every
tensor's absolute offset are computed in `__init__`; tensors are then written with
`os.pwrite` in whatever order they are ready, from any thread, with no buffering of a
whole shard.

A full disk fails at the start, not at the end: `open` refuses when the filesystem has
fewer bytes free than the files need. Each tensor's bytes are then reserved (fallocate)
when its first bytes arrive, not all at `open`: the sizes come from a checkpoint's
metadata, and one that lies (a sparse file, a blob it cannot decode) must not hold
gigabytes of disk before its first read fails. What is reserved ahead of the bytes read
is at most one tensor per writing thread, and a reservation that fails names the file.
Planning and raw-byte writes (`write_range`, `copy_range`) need no torch (dtypes are
`mfsdp_ckpt.format.dtypes` records); only `write`, which takes a tensor, touches it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.format.dtypes import DType
from mfsdp_ckpt.format.model_files import INDEX_FILE
from mfsdp_ckpt.format.step_saving import fsync_path
from mfsdp_ckpt.storage.file_errors import naming_file

if TYPE_CHECKING:
    import torch

Spec = tuple[str, DType, tuple[int, ...]]  # one output tensor: name, dtype, shape
SINGLE_FILE = "model.safetensors"
_PWRITE_MAX = 1 << 30  # Linux caps one write at ~2 GiB; stay well under
# Bytes written (or copied in the kernel) at a time while `on_written` reports them: the
# window validate --deep reads by (STREAM_PIECE_ELEMENTS of fp32), so a bar moves within
# one large tensor.
REPORTED_BYTES = 4 << 20
# Every file this writer makes (every export's weights) says so in its header's
# `__metadata__`, first thing: `export-hf --overwrite` replaces a model dir only where its
# weights carry it (`carries_export_mark`). By its files alone an earlier export looks like
# any Hugging Face model dir, a download or the run's own base model among them.
_METADATA = {"format": "pt", "written_by": "mfsdp export-hf"}
_MARKED_START = json.dumps({"__metadata__": _METADATA}, separators=(",", ":")).encode()[:-1]


@dataclass(frozen=True)
class TensorSlot:
    """Where one tensor's bytes go: file and absolute byte offset."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    file: str
    offset: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def shard_file_name(index: int, count: int) -> str:
    return SINGLE_FILE if count == 1 else f"model-{index + 1:05d}-of-{count:05d}.safetensors"


def _assign_shards(specs: list[Spec], max_shard_bytes: int) -> list[list[int]]:
    """Greedy, in order: start a new shard when the next tensor would overflow this one."""
    shards: list[list[int]] = [[]]
    size = 0
    for i, (_name, dtype, shape) in enumerate(specs):
        nbytes = math.prod(shape) * dtype.itemsize
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(i)
        size += nbytes
    return shards


def _header(slots: list[Spec]) -> tuple[bytes, list[int]]:
    """The padded header and each tensor's offset relative to the data section."""
    entries: dict[str, object] = {"__metadata__": dict(_METADATA)}
    relative, position = [], 0
    for name, dtype, shape in slots:
        nbytes = math.prod(shape) * dtype.itemsize
        entries[name] = {
            "dtype": dtype.safetensors,
            "shape": list(shape),
            "data_offsets": [position, position + nbytes],
        }
        relative.append(position)
        position += nbytes
    raw = json.dumps(entries, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data section 8-byte aligned, as safetensors writes it
    return len(raw).to_bytes(8, "little") + raw, relative


def carries_export_mark(path: Path) -> bool:
    """Whether the safetensors file at `path` was written by this writer: its header opens
    with the `__metadata__` `_header` puts first. One that cannot be read does not."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8 + len(_MARKED_START) + 1)
    except OSError:
        return False
    return head[8:-1] == _MARKED_START and head[-1:] in (b",", b"}")


class ShardedSafetensorsWriter:
    """`write(name, tensor)` from any thread; `close()` fsyncs and writes the index.

    >>> writer = ShardedSafetensorsWriter(out, [("w", dtypes.BFLOAT16, (4, 4))], 5 * 10**9)
    >>> writer.write("w", torch.zeros(4, 4, dtype=torch.bfloat16)); writer.close()
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        specs: list[Spec],
        max_shard_bytes: int,
    ):
        unknown = [(name, dtype) for name, dtype, _ in specs if dtype.safetensors is None]
        if unknown:
            raise ValueError(f"{unknown[0][0]}: dtype {unknown[0][1]} has no safetensors code")
        self.out_dir = Path(out_dir)
        shards = _assign_shards(specs, max_shard_bytes)
        self.slots: dict[str, TensorSlot] = {}
        self.files: dict[str, int] = {}  # file name -> total bytes
        self._headers: dict[str, bytes] = {}
        for index, members in enumerate(shards):
            file = shard_file_name(index, len(shards))
            chosen = [specs[i] for i in members]
            header, relative = _header(chosen)
            self._headers[file] = header
            for (name, dtype, shape), offset in zip(chosen, relative):
                self.slots[name] = TensorSlot(name, dtype, tuple(shape), file, len(header) + offset)
            self.files[file] = len(header) + sum(math.prod(s) * d.itemsize for _, d, s in chosen)
        self._fds: dict[str, int] = {}
        self._written: set[str] = set()
        self._reserved: set[str] = set()  # tensors whose bytes are fallocated
        self._lock = threading.Lock()
        # One writer per file at a time: concurrent buffered writes into one ext4 file
        # contend on its inode and page-cache locks, slower than one thread writing big
        # pieces; the other threads read and convert.
        self._file_locks = {file: threading.Lock() for file in self.files}
        # Called with each count of tensor bytes as it lands (from the writing thread), at
        # most REPORTED_BYTES at a time: an export's progress.
        self.on_written: Callable[[int], None] | None = None

    @property
    def total_bytes(self) -> int:
        return sum(slot.nbytes for slot in self.slots.values())

    def open(self) -> None:
        """Create every file and write its header, once the filesystem has room for them
        all (ENOSPC now rather than after hours of writing)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        _require_free(self.out_dir, sum(self.files.values()))
        for file in self.files:
            path = self.out_dir / file
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self._fds[file] = fd
            _pwrite_all(fd, memoryview(self._headers[file]), 0, path)

    def _reserve(self, slot: TensorSlot) -> None:
        """Reserve `slot`'s bytes the first time any of them is written (contiguous on disk,
        and a full disk fails here, before the tensor's first byte rather than midway)."""
        with self._lock:
            if slot.name in self._reserved:
                return
            self._reserved.add(slot.name)
        if not slot.nbytes or not hasattr(os, "posix_fallocate"):
            return
        try:
            os.posix_fallocate(self._fds[slot.file], slot.offset, slot.nbytes)
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # filesystem can't; fine
                raise OSError(
                    err.errno,
                    f"cannot reserve {slot.nbytes} bytes for {slot.name} ({err.strerror})",
                    str(self.out_dir / slot.file),
                ) from None

    def write(self, name: str, tensor: torch.Tensor) -> None:
        import torch

        slot = self.slots.get(name)
        if slot is None:
            raise KeyError(f"{name}: not in the planned export")
        if tensor.dtype != slot.dtype.torch or tuple(tensor.shape) != slot.shape:
            raise ValueError(
                f"{name}: got {tuple(tensor.shape)} {tensor.dtype}, planned {slot.shape} "
                f"{slot.dtype}"
            )
        data = tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data
        self._reserve(slot)
        with self._file_locks[slot.file]:
            self._pwrite(slot.file, data, slot.offset)
        self._mark_written(name)

    def write_range(self, name: str, data: memoryview, start: int, done: bool) -> None:
        """Write raw bytes of `name` (already in its planned dtype) at byte `start` of its
        slot: lets a tensor be converted and written a piece at a time. `done` marks it
        complete."""
        slot = self._range(name, start, len(data))
        with self._file_locks[slot.file]:
            self._pwrite(slot.file, data, slot.offset + start)
        if done:
            self._mark_written(name)

    def copy_range(
        self, name: str, src_fd: int, src_offset: int, start: int, nbytes: int, done: bool
    ) -> None:
        """Copy `nbytes` of raw tensor bytes from another file into `name` at byte `start`
        of its slot, in the kernel (copy_file_range: no user-space copy). `done` marks the
        tensor complete. Raises OSError where the kernel or filesystem cannot."""
        slot = self._range(name, start, nbytes)
        fd, copied, path = self._fds[slot.file], 0, self.out_dir / slot.file
        most = nbytes if self.on_written is None else REPORTED_BYTES
        with self._file_locks[slot.file]:
            while copied < nbytes:
                try:
                    count = os.copy_file_range(
                        src_fd,
                        fd,
                        min(nbytes - copied, most),
                        src_offset + copied,
                        slot.offset + start + copied,
                    )
                except OSError as err:
                    raise naming_file(err, path) from None
                if count <= 0:  # the source ended: it was truncated after its size was checked
                    raise _source_shrank(src_fd, src_offset + nbytes)
                copied += count
                if self.on_written is not None:
                    self.on_written(count)
        if done:
            self._mark_written(name)

    def _pwrite(self, file: str, data: memoryview, offset: int) -> None:
        """`data` into `file` at `offset`, reported to `on_written` as it lands."""
        fd, path, report = self._fds[file], self.out_dir / file, self.on_written
        if report is None:
            _pwrite_all(fd, data, offset, path)
            return
        for start in range(0, len(data), REPORTED_BYTES):
            piece = data[start : start + REPORTED_BYTES]
            _pwrite_all(fd, piece, offset + start, path)
            report(len(piece))

    def _range(self, name: str, start: int, nbytes: int) -> TensorSlot:
        """The slot bytes [start, start + nbytes) of `name` go to, reserved once written."""
        slot = self.slots[name]
        if start < 0 or start + nbytes > slot.nbytes:
            raise ValueError(f"{name}: bytes [{start}, {start + nbytes}) outside its {slot.nbytes}")
        self._reserve(slot)
        return slot

    def _mark_written(self, name: str) -> None:
        with self._lock:
            self._written.add(name)

    def close(self) -> None:
        """Check every tensor arrived, fsync the files, write the index (when sharded)."""
        missing = sorted(set(self.slots) - self._written)
        if missing:
            raise RuntimeError(f"{len(missing)} tensor(s) never written, e.g. {missing[0]}")
        for file, fd in self._fds.items():
            try:
                os.fsync(fd)
            except OSError as err:
                raise naming_file(err, self.out_dir / file) from None
        self.abort()
        if len(self.files) > 1:
            index = {
                "metadata": {"total_size": self.total_bytes},
                "weight_map": {name: slot.file for name, slot in sorted(self.slots.items())},
            }
            path = self.out_dir / INDEX_FILE
            path.write_text(json.dumps(index, indent=2) + "\n")
            fsync_path(path)

    def abort(self) -> None:
        """Close file descriptors (the caller removes the temporary directory)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _require_free(out_dir: Path, needed: int) -> None:
    """ENOSPC when `out_dir`'s filesystem reports fewer free bytes than `needed` (root may
    use the blocks kept for it). Nothing is reserved: a filesystem that reports no sizes
    (some FUSE mounts say 0 blocks) is not judged here, and its writes say it instead.
    The message names where that filesystem is mounted: `out_dir` is a hidden work dir
    beside the output, and "its filesystem" read as the output's own, which a user then
    checked with `df` and found free (the output a mount point, the work dir on its
    parent's filesystem)."""
    try:
        fs = os.statvfs(out_dir)
    except (OSError, AttributeError):  # no statvfs on this platform: the writes will tell
        return
    blocks = fs.f_bfree if os.geteuid() == 0 else fs.f_bavail
    free = blocks * fs.f_frsize
    if fs.f_blocks and needed > free:
        raise OSError(
            errno.ENOSPC,
            f"{out_dir}: {needed} bytes to write, the filesystem it is written on (mounted at"
            f" {mount_point(out_dir)}) has {free} free ({os.strerror(errno.ENOSPC)})",
        )


def mount_point(path: str | os.PathLike) -> str:
    """The mount point of the filesystem holding `path` (what `df PATH` names): its nearest
    ancestor, or itself, that `os.path.ismount` says is one."""
    current = os.path.abspath(path)
    while not os.path.ismount(current):
        current = os.path.dirname(current)
    return current


def _source_shrank(src_fd: int, needed: int) -> Exception:
    """`shrank_while_read` naming the source; imported here, as the checkpoint layout that
    module reads imports this one's file names."""
    from mfsdp_ckpt.check.removed_while_read import shrank_while_read

    return shrank_while_read(src_fd, needed)


def _pwrite_all(fd: int, data: memoryview, offset: int, path: Path) -> None:
    position = 0
    while position < len(data):
        try:
            written = os.pwrite(fd, data[position : position + _PWRITE_MAX], offset + position)
        except OSError as err:
            if naming_file(err, path) is err:  # the machine's (ENOMEM, EINTR): no file named
                raise
            raise OSError(err.errno, f"write failed ({err.strerror})", str(path)) from None
        position += written
