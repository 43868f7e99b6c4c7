"""Write a DCP checkpoint from one process, one tensor at a time, with no process group.

`dcp.save` plans over the whole state dict, so every tensor must be in memory (or at
least referenced) before the first byte is written. Import has the opposite shape: a
tensor exists only between its read and its write, or not at all when its bytes go file
to file. This writer produces what `dcp.save` with torch's FileSystemWriter produces on
one rank (with `thread_count` files), item by item:

* each tensor is a `torch.save` blob (`torch_save_format`) in one of the data files; its
  place (file, offset) is decided when it is added, from its size alone, and its bytes are
  written there later by that file's thread: byte ranges of source files (the caller's
  safetensors), or a tensor's bytes in memory (the caller waits for those, so at most one
  tensor is held);
* a tensor equal to one already added (a tied `lm_head.weight`) is an alias: its own key
  in `.metadata` whose storage entry names the other's bytes, so they are stored once;
* a non-tensor value (Megatron-LM's `checkpoint_version`, `iteration`) is a torch.save'd
  BYTE_IO blob, as DCP stores any non-tensor leaf;
* at the end `.metadata` is DCP's `Metadata` (each tensor one whole chunk, planner data
  mapping flat keys to their nested path, storage data to file ranges), written after the
  data files are fsynced. Until then each item is held as a few ints and shared objects
  (`metadata_table`), not as DCP's dataclasses.

Why one thread per data file: with `hash_data` the manifest needs each file's digest,
a sequential pass per file that costs CPU on top of the copy. Each thread copies
and hashes its own file in one pass (`byte_copy.copy_hashed`), so the cores share the
work; an item goes to the file with the fewest bytes so far, so the threads finish
together. Each thread fsyncs its own file when done.

So `dcp.load`, Megatron-LM's fsdp_dtensor load and our offline reader read it as they
read any single-rank save, and none of this imports torch.
"""

from __future__ import annotations

import errno
import math
import os
import queue
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format.dtypes import BY_NAME, DType
from mfsdp_ckpt.format.file_hash import Digest, FileRecord
from mfsdp_ckpt.format.layout import DCP_METADATA_FILE
from mfsdp_ckpt.format.step_saving import fsync_path
from mfsdp_ckpt.format.torch_save_format import (
    MAX_BLOB_BYTES,
    BlobLayout,
    object_blob,
    tensor_pickle,
)
from mfsdp_ckpt.storage.byte_copy import copy_bytes, copy_hashed, hash_file_range, pwrite_all
from mfsdp_ckpt.storage.file_errors import naming_file
from mfsdp_ckpt.storage.metadata_stream import write_metadata
from mfsdp_ckpt.storage.metadata_table import MetadataTable

if TYPE_CHECKING:
    import torch

DCP_VERSION = "1.0.0"  # torch.distributed.checkpoint.filesystem.CURRENT_DCP_VERSION
WRITE_THREADS = 2  # data files written (and hashed) at once: the machines this runs on may have 2
# Writeback of each this many bytes written is started at once (fsync at the end then has
# little left to wait for, instead of the whole file).
WRITEBACK_BYTES = 16 << 20


@dataclass(frozen=True)
class SourceRange:
    """`length` bytes at `offset` of the file at `path`: a piece of a tensor's payload."""

    path: Path
    offset: int
    length: int


Payload = Sequence[SourceRange] | memoryview  # source byte ranges, or bytes in memory
WriteProgress = Callable[[int, int], None]  # (tensors, their payload bytes) written so far
_PROGRESS_SECONDS = 0.25


class StreamingDcpWriter:
    """Add items (each placed in a data file at once, written by that file's thread), then
    `finish()` waits for the threads and writes `.metadata`.

    Paths are nested state-dict paths: ("model", "module.decoder...") is stored under the
    flat key "model.module.decoder..." as DCP's flatten_state_dict names it. There are
    `threads` data files (`__0_0.distcp`, `__0_1.distcp`, ...), as FileSystemWriter's
    `thread_count` makes; with `hash_data`, `finish()` returns each one's FileRecord.
    """

    def __init__(
        self,
        dist_ckpt_dir: str | os.PathLike,
        *,
        hash_data: bool = False,
        threads: int | None = None,
    ):
        self.root = Path(dist_ckpt_dir)
        self.root.mkdir(parents=True, exist_ok=True)
        self.hash_data = hash_data
        self._table = MetadataTable()
        self._files: list[_DataFile] = []
        try:
            for index in range(max(1, threads or WRITE_THREADS)):
                # rank 0's file names, as FileSystemWriter's
                self._files.append(_DataFile(self.root / f"__0_{index}.distcp", hash_data))
        except BaseException:
            self.abort()
            raise

    def _claim(self, path: tuple[str, ...]) -> str:
        key = self._table.new_key(path)
        for file in self._files:
            file.raise_error()
        return key

    def _place(self, path: tuple[str, ...], length: int) -> tuple[str, _DataFile, int]:
        """Claim the key and `length` bytes at the end of the file with the fewest bytes."""
        key = self._claim(path)
        file = min(self._files, key=lambda f: f.size)
        start, file.size = file.size, file.size + length
        return key, file, start

    def add_raw(
        self, path: tuple[str, ...], dtype: DType, shape: tuple[int, ...], payload: Payload
    ) -> None:
        """A tensor whose `prod(shape) * itemsize` raw little-endian bytes are `payload`:
        ranges of source files (copied later, by the file's thread) or bytes in memory
        (written before this returns, so the caller may free them)."""
        nbytes = math.prod(shape) * dtype.itemsize
        given = len(payload) if isinstance(payload, memoryview) else sum(r.length for r in payload)
        if given != nbytes:
            raise ValueError(f"{'.'.join(path)}: payload of {given} bytes, {nbytes} expected")
        layout = BlobLayout(tensor_pickle(dtype, shape), nbytes)
        if layout.length > MAX_BLOB_BYTES:
            raise BlobTooLargeError(f"{'.'.join(path)}: {nbytes} bytes need a ZIP64 blob")
        key, file, start = self._place(path, layout.length)
        self._record(key, path, (dtype, shape), file, start)
        job = _Blob(start, layout.head, payload, layout.tail, tensor_bytes=nbytes)
        file.submit(job, wait=isinstance(payload, memoryview))

    def add_tensor(self, path: tuple[str, ...], tensor: torch.Tensor) -> None:
        """A tensor in memory: its bytes framed as above, or `torch.save` itself when the
        blob needs ZIP64 (a tensor of 4 GiB or more)."""
        import torch

        tensor = tensor.detach().contiguous()
        dtype = BY_NAME[str(tensor.dtype).removeprefix("torch.")]
        data = tensor.reshape(-1).view(torch.uint8).numpy().data
        try:
            self.add_raw(path, dtype, tuple(tensor.shape), data)
        except BlobTooLargeError:
            self._add_torch_saved(path, dtype, tensor)

    def _add_torch_saved(self, path: tuple[str, ...], dtype: DType, tensor: torch.Tensor) -> None:
        """torch.save writes the blob in this thread, once the file's thread is idle (its
        length is known only afterwards); that thread then hashes what was written."""
        import torch

        key, file, start = self._place(path, 0)
        file.submit(_Barrier(), wait=True)
        with os.fdopen(os.dup(file.fd), "wb") as handle:
            handle.seek(start)
            torch.save(tensor, handle)
            file.size = handle.tell()
        self._record(key, path, (dtype, tuple(tensor.shape)), file, start)
        file.submit(_Readback(start, file.size, tensor.nbytes), wait=False)

    def add_alias(self, path: tuple[str, ...], same_as: tuple[str, ...]) -> None:
        """A tensor whose values are those of the tensor already added at `same_as` (a tied
        output layer and its embedding): a key of its own in `.metadata`, with the same dtype,
        shape and storage entry (file, offset, length), and no bytes of its own. DCP readers
        read each storage entry on its own, so both keys load the same bytes."""
        source = ".".join(same_as)
        if not self._table.is_tensor(source):
            raise ValueError(f"{'.'.join(path)}: {source} is not a tensor added before")
        self._table.add_alias(self._claim(path), path, source)

    def add_object(self, path: tuple[str, ...], value: Any) -> None:
        blob = object_blob(value)
        key, file, start = self._place(path, len(blob))
        self._record(key, path, None, file, start)
        file.submit(_Blob(start, blob, (), b"", tensor_bytes=None), wait=False)

    def _record(
        self,
        key: str,
        path: tuple[str, ...],
        tensor: tuple[DType, Sequence[int]] | None,
        file: _DataFile,
        start: int,
    ) -> None:
        """The item at `path` (a tensor's dtype and shape, or None) fills `file` from `start`
        to its end."""
        self._table.add(key, path, tensor, file.name, start, file.size - start)

    def written(self) -> tuple[int, int]:
        """Tensors, and their payload bytes, the files' threads have written so far."""
        return sum(f.tensors for f in self._files), sum(f.payload for f in self._files)

    def finish(self, progress: WriteProgress | None = None) -> dict[str, FileRecord | None]:
        """Wait for every file to be written and fsynced, write `.metadata`; returns the
        files written, each with its FileRecord (size and digest) when `hash_data` (else None).
        `progress(tensors, bytes)` hears what the threads have written while it waits."""
        records: dict[str, FileRecord | None] = {}
        for file in self._files:
            file.seal()
        for file in self._files:
            while progress is not None and not file.join_for(_PROGRESS_SECONDS):
                progress(*self.written())
            records[file.name] = file.join()
        if progress is not None:
            progress(*self.written())
        # its tables made while pickled straight into the file: held whole in memory, they
        # and the pickler's memo cost kilobytes a tensor (metadata_stream, metadata_table)
        metadata = self._table.metadata(save_id=str(uuid.uuid4()), version=DCP_VERSION)
        records[DCP_METADATA_FILE] = write_metadata(
            metadata, self.root / DCP_METADATA_FILE, self.hash_data
        )
        fsync_path(self.root)
        return records

    def abort(self) -> None:
        """Stop every file's thread (work still queued is dropped) and close the files."""
        for file in self._files:
            file.stop()


@dataclass
class _Blob:
    """head, payload, tail at `start`: one item's bytes."""

    start: int
    head: bytes
    payload: Payload
    tail: bytes
    tensor_bytes: int | None  # the payload of a tensor; None: a non-tensor value


@dataclass
class _Readback:
    """Bytes [start, end) written by another hand: only hashed."""

    start: int
    end: int
    tensor_bytes: int


class _Barrier:
    """Nothing to do: waiting for it means the file's thread has done all before it."""


_Job = _Blob | _Readback | _Barrier
_SEAL = object()


class _DataFile:
    """One data file and the thread that writes it: jobs run in the order submitted, the
    bytes hashed in file order as they are written, and the file fsynced at the end."""

    def __init__(self, path: Path, hashed: bool):
        self.name, self.path = path.name, path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
        self.size = 0  # bytes placed so far (the writer's view, ahead of the thread's)
        self.digest = Digest() if hashed else None
        self.written = 0  # bytes the thread has written and hashed, in order
        self._writeback_from = 0  # bytes before this have been handed to writeback
        self.tensors = 0  # tensors the thread has written
        self.payload = 0  # and their payload bytes
        self.error: BaseException | None = None
        self._stopping = False
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"dcp-{self.name}", daemon=True)
        self._thread.start()

    def submit(self, job: _Job, *, wait: bool) -> None:
        done = threading.Event() if wait else None
        self._jobs.put((job, done))
        if done is not None:
            done.wait()
            self.raise_error()

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while True:
            job, done = self._jobs.get()
            try:
                if job is _SEAL:
                    if self.error is None and not self._stopping:
                        os.fsync(self.fd)
                    return
                if self.error is None and not self._stopping:
                    self._do(job)
            except BaseException as err:  # re-raised in the writer's thread, naming the file
                self.error = naming_file(err, self.path) if isinstance(err, OSError) else err
            finally:
                if done is not None:
                    done.set()

    def _do(self, job: _Job) -> None:
        if isinstance(job, _Barrier):
            return
        if job.start != self.written:  # jobs come in file order: a gap would go unhashed
            raise RuntimeError(f"{self.name}: a job at {job.start}, the file at {self.written}")
        if isinstance(job, _Readback):
            if self.digest is not None:
                hash_file_range(self.fd, job.start, job.end, self.digest)
            self.written = job.end
            self._count(job.tensor_bytes)
            return
        at = self._write(memoryview(job.head), job.start)
        if isinstance(job.payload, memoryview):
            at = self._write(job.payload, at)
        else:
            at = self._copy(job.payload, at, counted=job.tensor_bytes is not None)
        self.written = self._write(memoryview(job.tail), at)
        if job.tensor_bytes is not None:
            self.tensors += 1
            if isinstance(job.payload, memoryview):
                self.payload += job.tensor_bytes

    def _count(self, tensor_bytes: int | None) -> None:
        if tensor_bytes is not None:
            self.tensors, self.payload = self.tensors + 1, self.payload + tensor_bytes

    def _write(self, data: memoryview, at: int) -> int:
        if self.digest is not None:
            self.digest.update(data)
        pwrite_all(self.fd, data, at)
        self._start_writeback(at + len(data))
        return at + len(data)

    def _copy(self, ranges: Sequence[SourceRange], at: int, counted: bool) -> int:
        """Copy the ranges to `at` on, WRITEBACK_BYTES at a time; each window's bytes count
        in `payload` as it lands when `counted` (a tensor's), so progress moves within a
        tensor of many GiB."""
        opened: dict[Path, int] = {}
        try:
            for piece in ranges:
                if piece.path not in opened:
                    opened[piece.path] = os.open(piece.path, os.O_RDONLY)
                src = opened[piece.path]
                for done in range(0, piece.length, WRITEBACK_BYTES):
                    count = min(WRITEBACK_BYTES, piece.length - done)
                    if self.digest is None:
                        copy_bytes(src, piece.offset + done, self.fd, at, count)
                    else:
                        copy_hashed(src, piece.offset + done, self.fd, at, count, self.digest)
                    at += count
                    if counted:
                        self.payload += count
                    self._start_writeback(at)
        finally:
            for fd in opened.values():
                os.close(fd)
        return at

    def _start_writeback(self, upto: int) -> None:
        """Hand [_writeback_from, upto) to the disk now, without waiting: Linux starts the
        writeback of dirty pages on POSIX_FADV_DONTNEED (and drops them once clean; they
        are not read again). Only a hint: the fsync at the end is what makes them durable."""
        if upto - self._writeback_from < WRITEBACK_BYTES or not hasattr(os, "posix_fadvise"):
            return
        os.posix_fadvise(
            self.fd, self._writeback_from, upto - self._writeback_from, os.POSIX_FADV_DONTNEED
        )
        self._writeback_from = upto

    def seal(self) -> None:
        """No more jobs: the thread fsyncs the file after the last one and ends."""
        self._jobs.put((_SEAL, None))

    def join_for(self, seconds: float) -> bool:
        """Wait at most `seconds` for the thread; whether it has ended."""
        self._thread.join(seconds)
        return not self._thread.is_alive()

    def join(self) -> FileRecord | None:
        self._thread.join()
        os.close(self.fd)
        self.fd = -1
        self.raise_error()
        if self.written != self.size:
            raise OSError(errno.EIO, f"{self.name}: {self.written} of {self.size} bytes written")
        return self.digest.record(self.written) if self.digest else None

    def stop(self) -> None:
        if self.fd < 0:
            return
        self._stopping = True
        self.seal()
        self._thread.join()
        os.close(self.fd)
        self.fd = -1


class BlobTooLargeError(MfsdpFailedError, ValueError):
    """The tensor needs a ZIP64 blob, which only `torch.save` writes here."""
