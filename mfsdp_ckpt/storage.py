"""How checkpoint bytes are fetched, kept apart from what they mean.

The reader asks a `ByteStore` for byte ranges of files named relative to the checkpoint
directory. `LocalByteStore` uses `os.pread` (no file offsets shared between threads);
other stores (object stores through tensorstore's kvstore, say) implement the same three
methods, so the reader, validate and export share one code path whatever the medium.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol


class CheckpointFileError(OSError):
    """A file the checkpoint refers to is missing, short, or escapes the checkpoint dir."""


class ByteStore(Protocol):
    root: str

    def read_range(self, name: str, offset: int, length: int) -> bytes: ...

    def size(self, name: str) -> int | None: ...

    def list_files(self) -> list[str]: ...


def _check_relative_name(name: str) -> None:
    """Refuse names that would leave the checkpoint directory (`../x`, `/etc/passwd`)."""
    parts = Path(name).parts
    if not name or Path(name).is_absolute() or ".." in parts or "\x00" in name:
        raise CheckpointFileError(f"{name!r}: file name escapes the checkpoint directory")


class LocalByteStore:
    """Files under one local directory; symlinks that point outside it are refused."""

    def __init__(self, root: str | os.PathLike):
        self.root = str(root)
        self._real_root = os.path.realpath(self.root)

    def _path(self, name: str) -> str:
        _check_relative_name(name)
        path = os.path.join(self.root, name)
        real = os.path.realpath(path)
        if os.path.commonpath([real, self._real_root]) != self._real_root:
            raise CheckpointFileError(f"{path}: symlink points outside the checkpoint ({real})")
        return path

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        path = self._path(name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise CheckpointFileError(f"{path}: file is missing") from None
        try:
            size = os.fstat(fd).st_size
            if offset < 0 or length < 0 or offset + length > size:
                raise CheckpointFileError(
                    f"{path}: needs bytes [{offset}, {offset + length}) but the file has {size}"
                    " (truncated?)"
                )
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
        try:
            return os.stat(self._path(name)).st_size
        except FileNotFoundError:
            return None

    def list_files(self) -> list[str]:
        names = []
        for dirpath, _dirnames, filenames in os.walk(self.root):
            for filename in filenames:
                names.append(os.path.relpath(os.path.join(dirpath, filename), self.root))
        return sorted(names)
