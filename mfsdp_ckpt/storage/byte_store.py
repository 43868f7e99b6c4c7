"""How checkpoint bytes are fetched, kept apart from what they mean.

The reader asks a `ByteStore` for byte ranges of files named relative to the checkpoint
directory. `LocalByteStore` uses `os.pread` (no file offsets shared between threads);
other stores (object stores through tensorstore's kvstore, say) implement the same three
methods, so the reader, validate and export share one code path whatever the medium.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mfsdp_ckpt.errors import MfsdpFailedError

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer


class CheckpointFileError(MfsdpFailedError, OSError):
    """A file the checkpoint refers to is missing, short, or escapes the checkpoint dir."""


class ByteStore(Protocol):
    root: str

    def read_range(self, name: str, offset: int, length: int) -> bytes: ...

    def size(self, name: str) -> int | None: ...

    def list_files(self) -> list[str]: ...


def read_into(store: ByteStore, name: str, offset: int, buffer: memoryview) -> None:
    """Fill `buffer` from `name` at `offset`, without an intermediate copy when the store can."""
    direct = getattr(store, "read_into", None)
    if direct is not None:
        direct(name, offset, buffer)
    else:
        buffer[:] = store.read_range(name, offset, len(buffer))


class RangeFile(io.RawIOBase):
    """A read-only file over bytes [offset, offset+length) of one stored file.

    `torch.load` given this object reads the zip directory with small reads and each
    storage with one `readinto` straight into the tensor's memory, so a tensor costs its
    own size in RAM rather than twice that (raw bytes plus the unpickled copy). Small
    reads are served from a few cached blocks: the zip directory is ~20 tiny reads.
    """

    BLOCK = 64 << 10

    def __init__(self, store: ByteStore, name: str, offset: int, length: int):
        self.store, self.name, self.base, self.length = store, name, offset, length
        self.position = 0
        self._blocks: dict[int, bytes] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        start = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.length}[whence]
        self.position = max(0, start + offset)
        return self.position

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        count = max(0, min(len(view), self.length - self.position))
        if count == 0:
            return 0
        if count >= self.BLOCK:
            read_into(self.store, self.name, self.base + self.position, view[:count])
        else:
            done = 0
            while done < count:
                block_start = (self.position + done) // self.BLOCK * self.BLOCK
                block = self._block(block_start)
                inner = self.position + done - block_start
                piece = min(count - done, len(block) - inner)
                view[done : done + piece] = block[inner : inner + piece]
                done += piece
        self.position += count
        return count

    def _block(self, start: int) -> bytes:
        block = self._blocks.get(start)
        if block is None:
            if len(self._blocks) >= 4:
                self._blocks.pop(next(iter(self._blocks)))
            size = min(self.BLOCK, self.length - start)
            block = self._blocks[start] = self.store.read_range(self.name, self.base + start, size)
        return block


def check_relative_name(name: str, root: str | None = None) -> None:
    """Refuse names that would leave the checkpoint directory (`../x`, `/etc/passwd`).
    `root`: the checkpoint dir whose `.metadata` names it, which the message starts with
    (a store reads the names its `.metadata` gives); without it the caller prefixes its own
    source (the manifest)."""
    parts = Path(name).parts
    if not name or Path(name).is_absolute() or ".." in parts or "\x00" in name:
        where = ""
        if root is not None:
            from mfsdp_ckpt.format.layout import DCP_METADATA_FILE  # it imports this module

            where = f"{os.path.join(root, DCP_METADATA_FILE)}: "
        raise CheckpointFileError(f"{where}file {name} escapes the checkpoint directory")


class LocalByteStore:
    """Files under one local directory; symlinks that point outside it are refused."""

    def __init__(self, root: str | os.PathLike):
        self.root = str(root)
        self._real_root = os.path.realpath(self.root)

    def _path(self, name: str) -> str:
        check_relative_name(name, self.root)
        path = os.path.join(self.root, name)
        real = os.path.realpath(path)
        if os.path.commonpath([real, self._real_root]) != self._real_root:
            raise CheckpointFileError(f"{path}: symlink points outside {self._within} ({real})")
        return path

    @property
    def _within(self) -> str:
        """The directory a link must stay in, by its own name (dist_ckpt/, iter_N/): "outside
        the checkpoint" read as outside the step dir, yet a link to a file beside dist_ckpt/
        in the same step is refused too."""
        name = os.path.basename(os.path.abspath(self.root)) or self.root
        return f"the checkpoint's {name}/"

    def _open(self, path: str) -> int:
        """A descriptor of a regular file inside the root (safe_files: no FIFO, device or
        directory is ever opened, so a crafted shard cannot hang or stream forever)."""
        from mfsdp_ckpt.storage import safe_files  # it imports this module's error type

        return safe_files.open_regular(path, self.root)

    def _open_checked(self, name: str, offset: int, length: int) -> tuple[str, int]:
        path = self._path(name)
        fd = self._open(path)
        size = os.fstat(fd).st_size
        if offset < 0 or length < 0 or offset + length > size:
            os.close(fd)
            raise CheckpointFileError(
                f"{path}: needs bytes [{offset}, {offset + length}) but the file has {size}"
                " (truncated?)"
            )
        return path, fd

    def open_fd(self, name: str) -> int:
        """A read-only descriptor of `name` (for copy_file_range); the caller closes it."""
        return self._open(self._path(name))

    def read_into(self, name: str, offset: int, buffer: memoryview) -> None:
        """pread straight into `buffer` (a tensor's memory): no intermediate bytes object."""
        path, fd = self._open_checked(name, offset, len(buffer))
        try:
            done = 0
            while done < len(buffer):
                count = os.preadv(fd, [buffer[done : done + (1 << 30)]], offset + done)
                if count <= 0:
                    raise CheckpointFileError(f"{path}: unexpected end of file at {offset + done}")
                done += count
        finally:
            os.close(fd)

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        path, fd = self._open_checked(name, offset, length)
        try:
            chunks = []
            remaining, position = length, offset
            while remaining:
                piece = os.pread(fd, min(remaining, 1 << 30), position)
                if not piece:
                    raise CheckpointFileError(f"{path}: unexpected end of file at {position}")
                chunks.append(piece)
                remaining -= len(piece)
                position += len(piece)
            return b"".join(chunks) if len(chunks) != 1 else chunks[0]
        finally:
            os.close(fd)

    def size(self, name: str) -> int | None:
        """Bytes in `name`; None when it is missing. Anything but a regular file is refused,
        and so is one that cannot be opened (permissions): validate, which reads no data
        without --deep, must not call a checkpoint valid that export cannot read."""
        path = self._path(name)
        try:
            os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as err:  # a directory on the way this user may not enter
            raise CheckpointFileError(f"{path}: unreadable ({err.strerror or err})") from None
        fd = self._open(path)
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    MAX_DEPTH = 64  # a checkpoint nests two or three levels; a 1,500-deep chain is crafted

    def list_files(self) -> list[str]:
        """Every file under the root, by relative name. Iterative, not following symlinks to
        directories, and refusing nesting past MAX_DEPTH (os.walk recurses: RecursionError)."""
        names, pending = [], [(self.root, 0)]
        while pending:
            directory, depth = pending.pop()
            if depth > self.MAX_DEPTH:
                raise CheckpointFileError(
                    f"{directory}: nested deeper than {self.MAX_DEPTH} directories"
                )
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append((entry.path, depth + 1))
                    elif not entry.is_dir():  # a link to a directory is not listed (as os.walk)
                        names.append(os.path.relpath(entry.path, self.root))
        return sorted(names)
