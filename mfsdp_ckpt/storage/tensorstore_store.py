"""A `ByteStore` over tensorstore's kvstore: local files, GCS, S3, HTTP with one code path.

tensorstore issues byte-range reads concurrently from its own thread pool and releases
the GIL while waiting, so export workers overlap their reads. `open_store` picks the
store from the location: plain paths use `LocalByteStore` (os.pread: tensorstore is
slower on local disk, `bench/export_hf.py --io tensorstore` in docs/benchmarks.md);
`file://`, `gs://`, `s3://`, `http(s)://` URLs use tensorstore. `--io tensorstore` forces it for a
local path.

tensorstore's C++ code logs each credential source it tried, at ERROR, on stderr while a
store opens and makes its first request (`native_log`): those lines are kept off the
terminal, so the command's one `error:` line is all it prints, and the last of them is
folded into that line when the server refused the request for want of credentials.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from mfsdp_ckpt.check.printable import MAX_ERROR_CHARS, error_line, printable
from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.storage.byte_store import (
    ByteStore,
    CheckpointFileError,
    LocalByteStore,
    check_relative_name,
)
from mfsdp_ckpt.storage.native_log import captured_native_log
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory
from mfsdp_ckpt.storage.url_form import check_url_form, parser_refusal

URL_SCHEMES = ("file://", "gs://", "s3://", "http://", "https://")
# tensorstore answers a read with a new bytes object of the whole range: a range is read at
# most this many bytes at a time into the caller's memory, so a tensor read whole costs its
# own size plus a piece (was twice its size, or more), and a streamed one a few pieces per
# thread. A piece in flight costs several times its size (tensorstore's copy, the bytes, the
# buffer, spread over the allocator's per-thread arenas), so it is the local cast's 4 MiB:
# larger pieces raise a 4-thread export's peak (bench/export_hf.py's tensorstore row, run
# with this constant changed) for no fewer bytes moved.
READ_PIECE_BYTES = 4 << 20
# tensorstore retries a failed request up to 32 times, waiting up to 32 s between tries: a
# host that refuses connections hangs a command for many minutes. A few quick retries
# still ride out a dropped connection; then the command fails in one line.
_RETRIES = {"max_retries": 4, "initial_delay": "0.5s", "max_delay": "4s"}
_CONTEXT = {f"{kind}_request_retries": _RETRIES for kind in ("http", "gcs", "s3")}
_SIZE_IN_ERROR = re.compile(r"value of size (\d+)")
# a server's refusal that the credential lookup's log explains (no credentials found)
_AUTH_REFUSED = re.compile(r"(PERMISSION_DENIED|UNAUTHENTICATED)\b")


def is_url(location: str) -> bool:
    """Whether `location` is a URL, read through tensorstore, rather than a local path. One
    naming a scheme here but not in its form (`file://relative`, `gs://` without a bucket,
    `s3:/x`) is refused (`url_form.URLFormError`, exit 2), neither read as a local path nor
    left to tensorstore's parser."""
    check_url_form(location)
    return location.startswith(URL_SCHEMES)


def join_location(location: str, *parts: str) -> str:
    """Join path segments onto a path or URL without mangling `scheme://` (Path would)."""
    if not is_url(location):
        return str(Path(location, *parts))
    return "/".join([location.rstrip("/"), *parts])


class URLLocation(str):
    """A URL that joins as a Path does (`url / "name"`), keeping its `scheme://`: a
    reader's root made a Path lost a slash (`file:/abs/iter_0000100`), and a message or
    record naming it (`[args]`, the config derived from it) could no longer be read back as
    the URL it came from (export-hf --verify of a Megatron-LM run at a file:// URL)."""

    def __truediv__(self, name: str | os.PathLike) -> URLLocation:
        return URLLocation(join_location(self, os.fspath(name)))


def location_root(location: str | os.PathLike) -> Path | URLLocation:
    """`location` as a root to join names onto: a URL kept whole (`URLLocation`), a local
    path as a Path."""
    text = os.fspath(location)
    return URLLocation(text) if is_url(text) else Path(text)


def _import_tensorstore(asked_by: str) -> ModuleType:
    """tensorstore, imported where a store is opened: it is an optional extra that a plain
    `pip install mfsdp` leaves out, so its absence is one line naming what asked for it and
    the extra to install (exit 2), not an import traceback."""
    try:
        import tensorstore
    except ImportError as error:
        raise MfsdpUsageError(
            f"{asked_by} needs tensorstore (pip install 'mfsdp[tensorstore]'): {error}"
        ) from None
    return tensorstore


class TensorstoreByteStore:
    """Byte ranges of files under one kvstore URL (`file:///x`, `gs://bucket/x`, ...)."""

    def __init__(self, url: str, asked_by: str = "tensorstore I/O"):
        """`asked_by`: the setting or location that chose tensorstore, named if it is missing."""
        ts = _import_tensorstore(asked_by)
        # one slash ends the root; `file:///` (the root directory) keeps its three, which
        # stripped to `file:/` was tensorstore's parser's error, not "not a checkpoint"
        stripped = url.rstrip("/")
        self.root = f"{stripped}///" if stripped.endswith(":") else f"{stripped}/"
        self._native_log: list[str] = []  # what tensorstore logged looking credentials up
        self._looked_up = False  # its first request made: credentials found or not
        try:
            with captured_native_log(self._native_log):
                self._kv = ts.KvStore.open(self.root, context=ts.Context(_CONTEXT)).result()
        except Exception as err:
            reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
            refused = parser_refusal(url, err)  # a mistake in the URL: bad usage
            if refused is not None:
                raise refused from None
            raise CheckpointFileError(
                f"{url}: tensorstore cannot open it ({self._said(err)})"
            ) from None

    def _result(self, request: Callable[[], Any]) -> Any:
        """`request()`'s future's result; until the store's first request has run, with
        stderr captured, as tensorstore looks its credentials up then (started within the
        capture: the lookup runs on tensorstore's threads once the request is made)."""
        if self._looked_up:
            return request().result()
        try:
            with captured_native_log(self._native_log):
                return request().result()
        finally:
            self._looked_up = True

    def _said(self, err: Exception) -> str:
        """tensorstore's error for a line quoting it; a refusal for want of credentials ends
        with what the credential lookup logged last (which file or variable it missed)."""
        said = error_line(err, with_type=False)
        if self._native_log and _AUTH_REFUSED.match(said):
            logged = printable(self._native_log[-1], MAX_ERROR_CHARS)
            said = f"{said}; tensorstore's credential lookup: {logged}"
        return said

    def _read(self, name: str, byte_range: slice | None) -> bytes:
        check_relative_name(name, self.root)
        try:
            result = self._result(lambda: self._kv.read(name, byte_range=byte_range))
        except Exception as err:
            reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
            raise CheckpointFileError(
                f"{self.root}{name}: read failed ({self._said(err)})"
            ) from None
        if result.state != "value":
            raise CheckpointFileError(f"{self.root}{name}: file is missing")
        return result.value

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        if length == 0:
            return b""
        data = self._read(name, slice(offset, offset + length))
        if len(data) != length:
            raise CheckpointFileError(
                f"{self.root}{name}: needs bytes [{offset}, {offset + length}), got {len(data)} "
                "(truncated?)"
            )
        return data

    def read_into(self, name: str, offset: int, buffer: memoryview) -> None:
        """Fill `buffer` (bytes) from `name` at `offset`, READ_PIECE_BYTES at a time; a short
        piece is `read_range`'s truncation error, naming the file and the piece's range."""
        for start in range(0, len(buffer), READ_PIECE_BYTES):
            end = min(start + READ_PIECE_BYTES, len(buffer))
            buffer[start:end] = self.read_range(name, offset + start, end - start)

    def size(self, name: str) -> int | None:
        """kvstore has no stat: ask for a range past any real file and read the size from
        the OUT_OF_RANGE answer; fall back to reading the value when a driver words it otherwise."""
        check_relative_name(name, self.root)
        beyond = 1 << 62
        try:
            result = self._result(lambda: self._kv.read(name, byte_range=slice(beyond, beyond + 1)))
        except Exception as err:
            reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
            match = _SIZE_IN_ERROR.search(str(err))
            if match:
                return int(match.group(1))
            if "OUT_OF_RANGE" not in str(err):  # unreachable, denied: not a missing file
                raise CheckpointFileError(
                    f"{self.root}{name}: read failed ({self._said(err)})"
                ) from None
            result = None
        if result is not None and result.state == "missing":
            return None
        try:
            return len(self._read(name, None))
        except CheckpointFileError:
            return None

    def list_files(self) -> list[str]:
        """Every key under the root; an HTTP server lists nothing (tensorstore refuses)."""
        try:
            keys = self._result(self._kv.list)
        except Exception as err:
            reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
            raise CheckpointFileError(
                f"{self.root}: cannot list its files ({self._said(err)})"
            ) from None
        return sorted(key.decode() for key in keys)


def open_store(location: str, io: str = "auto") -> ByteStore:
    """The store for a dist_ckpt location. io: auto (URL -> tensorstore), local, tensorstore."""
    if io == "tensorstore" or (io == "auto" and is_url(location)):
        # as_uri: a `%` or space in a local path is escaped, as tensorstore's parser needs
        url = location if is_url(location) else Path(location).resolve().as_uri()
        asked_by = "--io tensorstore" if io == "tensorstore" else f"{location}: a URL"
        return TensorstoreByteStore(url, asked_by)
    if is_url(location):
        raise ValueError(
            f"{location}: a URL needs the tensorstore I/O layer (--io tensorstore or auto)"
        )
    return LocalByteStore(location)
