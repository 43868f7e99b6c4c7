"""Write a DCP checkpoint from one process, one tensor at a time, with no process group.

`dcp.save` plans over the whole state dict, so every tensor must be in memory (or at
least referenced) before the first byte is written. Import has the opposite shape: a
tensor exists only between its read and its write, or not at all when its bytes go file
to file in the kernel. This writer produces what `dcp.save` with torch's
FileSystemWriter produces on one rank, item by item:

* each tensor is a `torch.save` blob appended to a data file (`torch_save_format`); its
  payload is written by the caller at a given file offset (`copy_file_range` from the
  source, or a tensor's bytes), so the writer never holds it;
* a non-tensor value (Megatron-LM's `checkpoint_version`, `iteration`) is a torch.save'd
  BYTE_IO blob, as DCP stores any non-tensor leaf;
* at the end `.metadata` is DCP's `Metadata` (each tensor one whole chunk, planner data
  mapping flat keys to their nested path, storage data to file ranges), written after the
  data files are fsynced.

So `dcp.load`, Megatron-LM's fsdp_dtensor load and our offline reader read it as they
read any single-rank save, and none of this imports torch. With `hash_data` each data
file's sha256 (for a manifest) is computed alongside, by a thread trailing the writer.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format import dcp_metadata
from mfsdp_ckpt.format.dtypes import BY_NAME, DType
from mfsdp_ckpt.format.layout import DCP_METADATA_FILE, fsync_path
from mfsdp_ckpt.format.manifest import FileRecord
from mfsdp_ckpt.format.torch_save_format import (
    MAX_BLOB_BYTES,
    BlobLayout,
    Size,
    dump_metadata,
    object_blob,
    tensor_metadata,
    tensor_pickle,
)

if TYPE_CHECKING:
    import torch

DCP_VERSION = "1.0.0"  # torch.distributed.checkpoint.filesystem.CURRENT_DCP_VERSION
_PWRITE_MAX = 1 << 30
_HASH_PIECE = 64 << 20
HASH_THREADS = 2  # data files hashed at once (the machines this runs on may have 2 cores)
FillPayload = Callable[[int, int], None]  # (data file fd, absolute offset) -> payload written there


class StreamingDcpWriter:
    """Append items to `.distcp` data files, then `finish()` writes `.metadata`.

    Paths are nested state-dict paths: ("model", "module.decoder...") is stored under the
    flat key "model.module.decoder..." as DCP's flatten_state_dict names it. A new data
    file (`__0_1.distcp`, ...) starts once one holds `file_bytes`: with `hash_data`, each
    file is hashed by its own thread, so hashing spreads over the cores while the copies
    go on (sha256 is a sequential pass per file).
    """

    def __init__(
        self,
        dist_ckpt_dir: str | os.PathLike,
        *,
        hash_data: bool = False,
        file_bytes: int = 1 << 30,
    ):
        self.root = Path(dist_ckpt_dir)
        self.root.mkdir(parents=True, exist_ok=True)
        self.hash_data, self.file_bytes = hash_data, file_bytes
        self._files: list[_DataFile] = []
        self._entries: dict[str, Any] = {}
        self._storage: dict[dcp_metadata.MetadataIndex, dcp_metadata._StorageInfo] = {}
        self._planner: dict[str, tuple[str, ...]] = {}
        self._open_next()

    @property
    def _file(self) -> _DataFile:
        return self._files[-1]

    def _open_next(self) -> None:
        """Start the next data file. The previous one's hasher is sealed, and while
        `HASH_THREADS` hashers still run the copy waits for the oldest: threads, mapped
        windows (RSS) and hashing lag stay bounded whatever the model size."""
        if self._files:
            previous = self._file  # closed, not yet fsynced: finish() syncs all files at once,
            os.close(previous.fd)  # so writeback overlaps the copies instead of stalling them
            previous.fd = -1
        if self._files and self._file.hasher is not None:
            self._file.hasher.seal()
            running = [f.hasher for f in self._files if f.hasher is not None and f.hasher.running]
            while len(running) >= HASH_THREADS:
                running.pop(0).join()
        name = f"__0_{len(self._files)}.distcp"  # rank 0's file names, as FileSystemWriter's
        fd = os.open(self.root / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        hasher = _TrailingHasher(self.root / name) if self.hash_data else None
        self._files.append(_DataFile(name, fd, 0, hasher))

    def _claim(self, path: tuple[str, ...]) -> str:
        key = ".".join(path)
        if key in self._planner:
            raise ValueError(f"{key}: written twice")
        self._planner[key] = path
        if self._file.size >= self.file_bytes:
            self._open_next()
        return key

    def add_raw(
        self, path: tuple[str, ...], dtype: DType, shape: tuple[int, ...], fill: FillPayload
    ) -> None:
        """A tensor whose `prod(shape) * itemsize` raw little-endian bytes `fill` writes."""
        nbytes = math.prod(shape) * dtype.itemsize
        layout = BlobLayout(tensor_pickle(dtype, shape), nbytes)
        if layout.length > MAX_BLOB_BYTES:
            raise BlobTooLargeError(f"{'.'.join(path)}: {nbytes} bytes need a ZIP64 blob")
        key = self._claim(path)
        file = self._file
        start = file.size
        _pwrite_all(file.fd, memoryview(layout.head), start)
        payload_at = layout.payload_offset
        assert payload_at is not None  # set whenever a payload size is given, as here
        fill(file.fd, start + payload_at)
        _pwrite_all(file.fd, memoryview(layout.tail), start + payload_at + nbytes)
        file.size = start + layout.length
        self._record(key, tensor_metadata(dtype, shape), Size([0] * len(shape)), start)

    def add_tensor(self, path: tuple[str, ...], tensor: torch.Tensor) -> None:
        """A tensor in memory: its bytes framed as above, or `torch.save` itself when the
        blob needs ZIP64 (a tensor of 4 GiB or more)."""
        import torch

        tensor = tensor.detach().contiguous()
        dtype = BY_NAME[str(tensor.dtype).removeprefix("torch.")]
        data = tensor.reshape(-1).view(torch.uint8).numpy().data
        try:
            self.add_raw(path, dtype, tuple(tensor.shape), lambda fd, at: _pwrite_all(fd, data, at))
        except BlobTooLargeError:
            key = self._claim(path)
            file = self._file
            start = file.size
            with os.fdopen(os.dup(file.fd), "wb") as handle:
                handle.seek(start)
                torch.save(tensor, handle)
                file.size = handle.tell()
            self._record(
                key, tensor_metadata(dtype, tuple(tensor.shape)), Size([0] * tensor.dim()), start
            )

    def add_object(self, path: tuple[str, ...], value: Any) -> None:
        key = self._claim(path)
        file = self._file
        blob, start = object_blob(value), file.size
        _pwrite_all(file.fd, memoryview(blob), start)
        file.size = start + len(blob)
        self._record(key, dcp_metadata.BytesStorageMetadata(), None, start)

    def _record(self, key: str, entry: Any, offsets: Size | None, start: int) -> None:
        file = self._file
        if file.hasher is not None:
            file.hasher.advance(file.size)
        self._entries[key] = entry
        index = dcp_metadata.MetadataIndex(key, offsets)
        self._storage[index] = dcp_metadata._StorageInfo(file.name, start, file.size - start)

    def finish(self) -> dict[str, FileRecord | None]:
        """fsync the data, write `.metadata`; returns the files written, each with its size
        and sha256 when `hash_data` (else None)."""
        records: dict[str, FileRecord | None] = {}
        for file in self._files:
            if file.fd >= 0:
                os.close(file.fd)
                file.fd = -1
            fsync_path(self.root / file.name)
        for file in self._files:
            records[file.name] = file.hasher.finish() if file.hasher else None
        metadata = dcp_metadata.Metadata(
            state_dict_metadata=self._entries,
            planner_data=self._planner,
            storage_data=self._storage,
            storage_meta=dcp_metadata.StorageMeta(save_id=str(uuid.uuid4())),
            version=DCP_VERSION,
        )
        pickled = dump_metadata(metadata)
        with open(self.root / DCP_METADATA_FILE, "wb") as handle:
            handle.write(pickled)
            handle.flush()
            os.fsync(handle.fileno())
        fsync_path(self.root)
        records[DCP_METADATA_FILE] = FileRecord(len(pickled), hashlib.sha256(pickled).hexdigest())
        return records

    def abort(self) -> None:
        for file in self._files:
            if file.hasher is not None:
                file.hasher.stop()
            if file.fd >= 0:
                os.close(file.fd)
                file.fd = -1


@dataclass
class _DataFile:
    name: str
    fd: int
    size: int
    hasher: _TrailingHasher | None


class _TrailingHasher:
    """sha256 of one data file, computed in a thread that follows the writer: the bytes a
    tensor just landed are hashed (from the page cache, through a mapping) while the next
    tensor is copied in the kernel. hashlib releases the GIL."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDONLY)
        self.digest = hashlib.sha256()
        self.hashed = 0
        self.target = 0
        self.closed = False
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="import-hash", daemon=True)
        self._thread.start()

    def advance(self, upto: int) -> None:
        with self._cond:
            self.target = upto
            self._cond.notify()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while self.hashed >= self.target and not self.closed:
                        self._cond.wait()
                    if self.hashed >= self.target and self.closed:
                        return
                    target = self.target
                self._hash_range(target)
        except BaseException as err:  # re-raised by finish() in the writer's thread
            self.error = err
        finally:
            os.close(self.fd)

    def _hash_range(self, target: int) -> None:
        """Hash [hashed, target) through read-only mappings of at most `_HASH_PIECE` bytes:
        the page cache is hashed in place, with no copy into a buffer first, and mapped
        pages never add more than one window to the RSS."""
        if os.fstat(self.fd).st_size < target:
            raise OSError(5, f"data file shorter than the {target} bytes written")
        while self.hashed < target:
            start = self.hashed - self.hashed % mmap.ALLOCATIONGRANULARITY
            end = min(target, start + _HASH_PIECE)
            with mmap.mmap(self.fd, end - start, prot=mmap.PROT_READ, offset=start) as mapped:
                view = memoryview(mapped)
                try:
                    self.digest.update(view[self.hashed - start :])
                finally:
                    view.release()
            self.hashed = end

    def seal(self) -> None:
        """The file is complete: hash what is left, then end the thread."""
        with self._cond:
            self.closed = True
            self._cond.notify()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self) -> None:
        self._thread.join()

    def stop(self) -> None:
        self.seal()
        self.join()

    def finish(self) -> FileRecord:
        self.stop()
        if self.error is not None:
            raise self.error
        return FileRecord(self.hashed, self.digest.hexdigest())


class BlobTooLargeError(MfsdpFailedError, ValueError):
    """The tensor needs a ZIP64 blob, which only `torch.save` writes here."""


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    done = 0
    while done < len(data):
        count = os.pwrite(fd, data[done : done + _PWRITE_MAX], offset + done)
        if count <= 0:
            raise OSError(5, f"pwrite stopped at {done} of {len(data)} bytes")
        done += count
