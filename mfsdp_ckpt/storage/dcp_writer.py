"""The DCP storage writer every mfsdp save goes through.

It adds three things to torch's `FileSystemWriter`, each a property the checkpoint
protocol relies on:

- a failed write in any of DCP's writer threads fails the save on that rank (torch only
  prints it and goes on, which could commit a checkpoint with data missing);
- every data file is hashed (file_hash.Digest) as its bytes are written, so the manifest needs no
  second pass over every byte a rank wrote: the digest is of exactly the bytes handed to the
  kernel, which is what a re-read from the page cache would have hashed;
- fault injection for crash-safety tests (`mid_file`: SIGKILL with a file half written).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

from mfsdp_ckpt.format.file_hash import Digest, FileRecord
from mfsdp_ckpt.storage.tensor_memory import memory_failure


class _HashingStream:
    """Write-through wrapper: digest and byte count of everything written. A seek would
    make the digest differ from the file, so it marks the digest unusable (the caller
    then hashes the file from disk); DCP's writer only appends and asks `tell()`."""

    def __init__(self, stream: Any):
        self._stream = stream
        self._digest = Digest()
        self.size = 0
        self.sequential = True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        if view.ndim != 1 or view.format not in ("B", "b", "c"):
            view = view.cast("B")
        count = self._stream.write(view)
        if count is None or count != view.nbytes:  # a short write: the digest no longer matches
            self.sequential = False
            count = view.nbytes if count is None else count
        self._digest.update(view[:count])
        self.size += count
        return count

    def seek(self, *args: Any) -> int:
        self.sequential = False
        return self._stream.seek(*args)

    def record(self) -> FileRecord | None:
        return self._digest.record(self.size) if self.sequential else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class CheckedFileSystem(FileSystem):
    """While `capturing`, a failed write (ENOSPC, EIO, ...) is recorded here instead of
    being printed by a writer thread, and `CheckedWriter.write_data` raises it on that
    rank, where DCP's own collectives carry it to every rank. Files written whole and in
    order get their `FileRecord` in `written`, keyed by file name."""

    def __init__(self) -> None:
        super().__init__()
        self.capturing = False
        self.failures: list[tuple[str, BaseException]] = []
        self.written: dict[str, FileRecord] = {}

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Iterator[io.IOBase]:
        """A failure while capturing is recorded, never raised in the writer thread: one
        raised there is printed as a thread traceback (after a Ctrl-C removed the temp dir,
        `Exception in thread ... generator didn't yield` followed the run's error line).
        A file that cannot even be opened gets a sink that drops its bytes, so the thread
        runs on to its end quietly and `write_data` raises the failure (or the save was
        abandoned already)."""
        opened = False
        try:
            with super().create_stream(path, mode) as stream:
                opened = True
                if "w" not in mode:
                    yield stream
                    return
                hashing = _HashingStream(stream)
                yield self._wrap(hashing)
            record = hashing.record()
            if record is not None:
                self.written[Path(path).name] = record
        except Exception as err:
            if not self.capturing:
                raise
            self.failures.append((str(path), err))
            if not opened:
                yield from _discarding_sink()

    def _wrap(self, stream: Any) -> Any:
        return stream


def _discarding_sink() -> Iterator[Any]:
    """Yield a stream that drops what is written to it and ignores what fails with it (the
    writer thread's `fsync` of /dev/null)."""
    with open(os.devnull, "wb") as sink, contextlib.suppress(Exception):
        yield sink


class _DieMidFile(CheckedFileSystem):
    """Fault injection for the `mid_file` phase: the first DCP data file to reach
    `MID_FILE_BYTES` is flushed to that point and the process is SIGKILLed, leaving a
    partial file in the temp dir, as a crash during the write would."""

    MID_FILE_BYTES = 4096

    def _wrap(self, stream: Any) -> Any:
        return _KillAfterBytes(stream, self.MID_FILE_BYTES)


class _KillAfterBytes:
    def __init__(self, stream: Any, limit: int):
        self._stream, self._limit, self._written = stream, limit, 0

    def write(self, data: Any) -> int:
        count = self._stream.write(data)
        self._written += count
        if self._written >= self._limit:
            self._stream.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return count

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class CheckedWriter(FileSystemWriter):
    fs: CheckedFileSystem

    def __init__(self, path: str, *, thread_count: int, kill_mid_file: bool = False):
        super().__init__(path, thread_count=thread_count)
        self.fs = _DieMidFile() if kill_mid_file else CheckedFileSystem()

    def write_data(self, plan: Any, planner: Any) -> Any:
        self.fs.capturing, self.fs.failures = True, []
        # Left on when the write raises (Ctrl-C): DCP's writer threads may still be running
        # when the temp dir is removed, and their failures are recorded, not printed.
        result = super().write_data(plan, planner)
        self.fs.capturing = False
        if self.fs.failures:
            path, err = self.fs.failures[0]
            memory = memory_failure(err)
            if memory is not None:  # the machine ran out, not the file it was writing
                raise memory
            raise OSError(f"{path}: {os_reason(err)}")
        return result

    def hashed_while_written(self) -> dict[str, FileRecord]:
        """FileRecords of the data files this rank wrote, by file name (see module docstring)."""
        return dict(self.fs.written)


def os_reason(err: BaseException) -> str:
    """The OSError behind a write failure (torch's zip writer re-raises ENOSPC as a
    RuntimeError about positions), else the error itself, in one line."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"
