"""Writes whose failure names the file they write.

A full disk fails a write through Python's file object (`Path.write_bytes`, transformers'
`to_json_file`) with an OSError that names no file: `[Errno 28] No space left on device`.
The libraries that save a model write from Rust and raise no OSError at all: safetensors'
`SafetensorError: Error while serializing: I/O error: File too large (os error 27)` and
tokenizers' plain `Exception: No space left on device (os error 28)`, which the CLI showed
as a traceback or as a line naming no file. Inside `writing(path)` each is an OSError that
names the file, with errno's words: `PATH: not written (File too large)` as
`file_errors.os_error_line` says it, errno kept (ENOSPC stays ENOSPC).

A library's save writes several files from Python (a tokenizer's tokenizer_config.json and
chat_template.jinja): the file named is the one the block last opened for writing, which
Python's audit hook for `open` tells, so the line never names the whole directory.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import threading
from collections.abc import Iterator

from mfsdp_ckpt.check.printable import error_line
from mfsdp_ckpt.storage.file_errors import NOT_ABOUT_THE_FILE, naming_file

# How Rust's std::io::Error ends its words: "No space left on device (os error 28)"
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


class _LastOpened:
    """The last file a `writing` block opened for writing (None before its first)."""

    __slots__ = ("path",)

    def __init__(self) -> None:
        self.path: str | None = None


class _OpenedForWriting(threading.local):
    """Per thread: the `writing` blocks running in it."""

    def __init__(self) -> None:
        self.blocks: list[_LastOpened] = []


_opened = _OpenedForWriting()


@contextlib.contextmanager
def writing(
    path: str | os.PathLike[str], rust_file: str | os.PathLike[str] | None = None
) -> Iterator[None]:
    """Run the block that writes `path` (a file, or a directory a library writes files
    into): an OSError naming no file names the file the block last opened for writing,
    else `path`; a library's Rust writer failing (safetensors, tokenizers) is an OSError
    naming `rust_file`, the one file that library writes from Rust where the block
    writes more than one (tokenizer.json of a tokenizer's files), else `path`. Other
    errors pass."""
    _watch_opens()
    last_opened = _LastOpened()
    _opened.blocks.append(last_opened)
    try:
        yield
    except OSError as err:
        if naming_file(err, path) is err:  # named already, mfsdp's own, or the machine's
            raise
        named = last_opened.path or os.fspath(path)
        raise OSError(err.errno, f"not written ({err.strerror})", named) from None
    except Exception as err:
        if not _from_rust_writer(err):
            raise
        found = _RUST_OS_ERROR.search(str(err))
        number = int(found.group(1)) if found else None
        if number in NOT_ABOUT_THE_FILE:  # the machine's (ENOMEM, EINTR): no file named
            raise OSError(number, os.strerror(number)) from None
        reason = os.strerror(number) if number is not None else error_line(err, with_type=False)
        raise OSError(number, f"not written ({reason})", os.fspath(rust_file or path)) from None
    finally:
        _opened.blocks.remove(last_opened)


@functools.cache
def _watch_opens() -> None:
    """Install the audit hook once per process (a hook cannot be removed; it does nothing
    outside a `writing` block)."""
    sys.addaudithook(_record_opened_for_writing)


def _record_opened_for_writing(event: str, args: tuple) -> None:
    """Audit hook: a file opened for writing (`open`, `os.open`) in this thread is the
    last one of each `writing` block running in it. The failure of a write, flush or
    close raises an OSError naming no file; this is how the block knows which file it was."""
    if event != "open" or not _opened.blocks:
        return
    path, _mode, flags = args
    if not isinstance(path, str | bytes | os.PathLike) or not isinstance(flags, int):
        return  # a descriptor opened again names no path
    if flags & (os.O_WRONLY | os.O_RDWR):
        name = os.fsdecode(path)
        for block in _opened.blocks:
            block.path = name


def write_bytes(path: str | os.PathLike[str], data: bytes, durable: bool = False) -> None:
    """`Path(path).write_bytes(data)`, its failure naming `path`; `durable` fsyncs the file
    before it returns (a manifest, written last, must be on disk before its step counts)."""
    with writing(path), open(path, "wb") as handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """`write_bytes` of `text` in UTF-8."""
    write_bytes(path, text.encode())


def _from_rust_writer(err: Exception) -> bool:
    """Whether `err` is a library's Rust writer failing: safetensors' SafetensorError
    (whatever it says: the file is not written), or the plain `Exception` tokenizers
    raises for an I/O error, which says "(os error N)"."""
    from safetensors import SafetensorError

    if isinstance(err, SafetensorError):
        return True
    return type(err) is Exception and _RUST_OS_ERROR.search(str(err)) is not None
