"""The per-file digest a manifest records: which algorithm, and how a file's bytes get it.

Everything mfsdp writes is recorded with XXH3-128 (`xxh3_128`): it hashes about 9x as fast as
sha256 on one core (`bench/file_hash.py`, docs/benchmarks.md), and with sha256 the hash of
every written byte was the largest CPU cost of a save or an import (more than the copy).
Manifests written before record `sha256`; they are read, and their files checked, with sha256
as before.

What the digest is for: finding bytes that changed after the save (a flipped bit, a
truncated or torn write, a file replaced by another step's). Either hash catches those with
certainty for practical purposes. Neither is a signature: anyone who can change a file can
change the manifest beside it, so neither proves who wrote a checkpoint.

The digests release the GIL while they hash (hashlib and xxhash both do), so threads that
hash different files use every core.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import xxhash

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.storage import safe_files

WRITE_ALGORITHM = "xxh3_128"
# Manifest field name -> (streaming digest, hex digits). A file record has exactly one of these.
ALGORITHMS: dict[str, tuple[Callable[[], Any], int]] = {
    "xxh3_128": (xxhash.xxh3_128, 32),
    "sha256": (hashlib.sha256, 64),
}
_READ_BLOCK = 8 << 20
Bytes = bytes | bytearray | memoryview
ByteProgress = Callable[[int, int], None]  # (bytes done, bytes in all)


class _Hash(Protocol):
    def update(self, data: Bytes, /) -> None: ...
    def hexdigest(self) -> str: ...


class FileRecordError(MfsdpFailedError, ValueError):
    """A manifest's file record is malformed (the caller names the manifest and the file)."""


class NewerRecordError(FileRecordError):
    """A file record holds a field this mfsdp does not know: a digest a newer mfsdp records,
    say. Not damage by itself (the manifest that holds it decides: `manifest._newer`), but
    nothing this mfsdp can check."""


@dataclass(frozen=True)
class FileRecord:
    """A file's size and its digest under `algorithm` (a key of ALGORITHMS). Two records are
    equal only with the same algorithm: digests of different algorithms never compare."""

    size: int
    digest: str
    algorithm: str

    def to_json(self) -> dict[str, Any]:
        """The manifest's form: {"size": ..., "<algorithm>": "<hex>"}."""
        return {"size": self.size, self.algorithm: self.digest}

    @classmethod
    def from_json(cls, record: Any) -> FileRecord:
        """Parse {"size": n, "<algorithm>": "<hex>"}: a size and exactly one known digest
        field, nothing else. Raises FileRecordError saying which field is wrong
        (NewerRecordError for a field this mfsdp does not know)."""
        if not isinstance(record, dict):
            raise FileRecordError("is not an object")
        size = record.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise FileRecordError("needs a size (a count of bytes)")
        unknown = sorted(str(key) for key in record if key != "size" and key not in ALGORITHMS)
        if unknown:
            raise NewerRecordError(
                f"has field {cut_to(repr(unknown[0]), 40)}, unknown to this mfsdp, whose"
                f" digests are {_known()}"
            )
        given = [name for name in ALGORITHMS if name in record]
        if len(given) != 1:
            what = "no digest" if not given else f"{len(given)} digests ({', '.join(given)})"
            raise FileRecordError(f"has {what}: needs exactly one of {_known()}")
        algorithm = given[0]
        digest = record[algorithm]
        if not isinstance(digest, str) or len(digest) != ALGORITHMS[algorithm][1]:
            raise FileRecordError(
                f"field {algorithm!r} is not {ALGORITHMS[algorithm][1]} hex digits"
            )
        return cls(size, digest, algorithm)


def _known() -> str:
    return " or ".join(ALGORITHMS)


class Digest:
    """A streaming digest that knows its algorithm, so what it hashed becomes a FileRecord."""

    def __init__(self, algorithm: str = WRITE_ALGORITHM):
        self.algorithm = algorithm
        self._hash: _Hash = ALGORITHMS[algorithm][0]()

    def update(self, data: Bytes, /) -> None:
        self._hash.update(data)

    def record(self, size: int) -> FileRecord:
        return FileRecord(size, self._hash.hexdigest(), self.algorithm)


class HashedBytes:
    """Bytes hashed so far over several files, reported to a `ByteProgress` block by block
    (`add` is `hash_file`'s `on_block`): hashing a checkpoint or a base model reads every
    byte, minutes for gigabytes, and a bar per file would say nothing of the whole."""

    def __init__(self, total: int, progress: ByteProgress | None):
        self.done, self.total, self.progress = 0, total, progress

    def add(self, count: int) -> None:
        self.done += count
        if self.progress is not None:
            self.progress(self.done, self.total)


def hash_bytes(data: Bytes, algorithm: str = WRITE_ALGORITHM) -> FileRecord:
    """The record of bytes in memory (a file about to be written from them)."""
    digest = Digest(algorithm)
    digest.update(data)
    return digest.record(memoryview(data).nbytes)


def hash_file(
    path: str | os.PathLike,
    root: str | os.PathLike | None = None,
    algorithm: str = WRITE_ALGORITHM,
    on_block: Callable[[int], None] | None = None,
    within: str = "the checkpoint",
) -> FileRecord:
    """The record of a regular file (inside `root` when given, which `within` names in an
    error), read in bounded blocks; anything else (a FIFO, a device, a link out of `root`)
    is refused unread. `on_block` gets each block's length as it is hashed (a progress bar
    over a large file)."""
    digest, size = Digest(algorithm), 0
    fd = safe_files.open_regular(path, root, within)
    with os.fdopen(fd, "rb") as handle:
        while block := handle.read(_READ_BLOCK):
            digest.update(block)
            size += len(block)
            if on_block is not None:
                on_block(len(block))
    return digest.record(size)


def hash_files(
    root: str | os.PathLike,
    names: list[str],
    workers: int = 4,
    algorithm: str = WRITE_ALGORITHM,
    links_anywhere: bool = False,
) -> dict[str, FileRecord]:
    """The record of each file under `root`, by name, hashed by `workers` threads at once.
    `links_anywhere`: the files may be links to anywhere (a model's weights, which the
    trainer loads wherever they lead); else they must resolve inside `root`."""
    return _hash_in_threads(root, [(name, algorithm) for name in names], workers, links_anywhere)


def rehash_like(
    root: str | os.PathLike,
    recorded: Mapping[str, FileRecord],
    workers: int = 4,
    links_anywhere: bool = False,
) -> dict[str, FileRecord]:
    """Each file of `recorded` (names under `root`) hashed again with the algorithm its
    record names, so old (sha256) and new (xxh3_128) records compare like for like."""
    jobs = [(name, record.algorithm) for name, record in recorded.items()]
    return _hash_in_threads(root, jobs, workers, links_anywhere)


def _hash_in_threads(
    root: str | os.PathLike, jobs: list[tuple[str, str]], workers: int, links_anywhere: bool
) -> dict[str, FileRecord]:
    root = Path(root)
    inside = None if links_anywhere else root
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        records = pool.map(lambda job: hash_file(root / job[0], inside, job[1]), jobs)
        return {name: record for (name, _), record in zip(jobs, records)}
