"""Writes whose failure names the file they write.

A full disk fails a write through Python's file object (`Path.write_bytes`, transformers'
`to_json_file`) with an OSError that names no file: `[Errno 28] No space left on device`.
The libraries that save a model write from Rust and raise no OSError at all: safetensors'
`SafetensorError: Error while serializing: I/O error: File too large (os error 27)` and
tokenizers' plain `Exception: No space left on device (os error 28)`, which the CLI showed
as a traceback or as a line naming no file. Inside `writing(path)` each is an OSError that
names the file, with errno's words: `PATH: not written (File too large)` as
`file_errors.os_error_line` says it, errno kept (ENOSPC stays ENOSPC).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

# How Rust's std::io::Error ends its words: "No space left on device (os error 28)"
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


@contextlib.contextmanager
def writing(
    path: str | os.PathLike[str], rust_file: str | os.PathLike[str] | None = None
) -> Iterator[None]:
    """Run the block that writes `path`: an OSError naming no file names `path`, and a
    library's Rust writer failing (safetensors, tokenizers) is an OSError naming
    `rust_file`, the one file that library writes from Rust where the block writes more
    than one (tokenizer.json of a tokenizer's files), else `path`. Other errors pass."""
    try:
        yield
    except OSError as err:
        if err.filename is not None or err.errno is None:  # named already, or mfsdp's own
            raise
        raise OSError(err.errno, f"not written ({err.strerror})", os.fspath(path)) from None
    except Exception as err:
        if not _from_rust_writer(err):
            raise
        found = _RUST_OS_ERROR.search(str(err))
        number = int(found.group(1)) if found else None
        reason = os.strerror(number) if number is not None else _one_line(err)
        raise OSError(number, f"not written ({reason})", os.fspath(rust_file or path)) from None


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


def _one_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
