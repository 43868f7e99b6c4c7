"""Write DCP's `.metadata` straight into its file, holding no more than the `Metadata` itself.

Pickling the `Metadata` of an import into memory first cost far more than its bytes: the
pickle (hundreds of bytes a tensor) was held twice (the buffer and its copy), and the
pickler's memo kept every object it had seen alive to the end, the short-lived tuples and
state dicts that the reducers of `DcpMetadataPickler` build for each entry included (about
5 KiB a tensor, so gigabytes for a mixture-of-experts model of 100k+ tensors).

Here the pickle goes through a bounded buffer to the file (hashed on its way, for the
manifest), and the memo lets go of an object once nothing but the memo holds it (such an
object can never be pickled again, so no later `GET` can need it, and it is not kept alive
to make its id unique: its memo entry is gone with it), or once it is one of those a
`Metadata` never holds twice (an entry, its state, its chunk list). What may come again (a
key, a file name, a shared size, a class) stays memoized, so the bytes are those
`dump_metadata` gives: the memo indices are numbered on (never reused), and every `GET` it
would write is written.

A table may be a `StreamedDict`, whose items are made one at a time while they are
pickled, and let go once written: the `Metadata` of `metadata_table` is never held whole.
Its objects are then held by the memo alone, so the next sweep drops them; pickled as a
dict is (whose batching keeps a thousand items alive at once), each would be in use at
its sweep and so stay memoized to the end.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
from collections.abc import Callable, Iterable
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar

from mfsdp_ckpt.format import dcp_metadata
from mfsdp_ckpt.format.file_hash import Digest, FileRecord
from mfsdp_ckpt.format.torch_save_format import DcpMetadataPickler
from mfsdp_ckpt.storage.byte_copy import pwrite_all
from mfsdp_ckpt.storage.file_errors import naming_file

_BUFFER_BYTES = 1 << 20
_SWEEP_EVERY = 4096  # memo entries added between two looks at which ones only the memo holds


def _memo_only_count() -> int:
    """What `sys.getrefcount` reports, as `_sweep` calls it, for an object held by a memo
    entry alone (the count differs between interpreters)."""
    memo = {0: (0, object())}
    return sys.getrefcount(memo[0][1])


_MEMO_ONLY = _memo_only_count()


# What a `Metadata` is made of, apart from the dtypes and sizes shared between entries
_ENTRY_CLASSES = (
    dcp_metadata.Metadata,
    dcp_metadata.StorageMeta,
    dcp_metadata.TensorStorageMetadata,
    dcp_metadata.BytesStorageMetadata,
    dcp_metadata.TensorProperties,
    dcp_metadata.ChunkStorageMetadata,
    dcp_metadata.MetadataIndex,
    dcp_metadata.StorageInfo,
)


class StreamedDict:
    """A dict that is only ever pickled (by `write_metadata`): `items()` makes its items
    as the pickler asks for them, and they are written as those of a dict."""

    def __init__(self, items: Callable[[], Iterable[tuple[Any, Any]]]):
        self.items = items


def _save_streamed(pickler: _LeanPickler, table: StreamedDict) -> None:
    """The bytes `pickle._Pickler.save_dict` writes for a dict of `table`'s items (batches
    of `_BATCHSIZE` between MARK and SETITEMS, a batch of one as SETITEM), with no item
    held once it is written: two are made ahead, to know a batch's size before it begins."""
    pickler.write(pickle.EMPTY_DICT)
    pickler.memoize(table)
    items = iter(table.items())
    ahead = list(islice(items, 2))
    while ahead:
        single = len(ahead) == 1
        if not single:
            pickler.write(pickle.MARK)
        for _ in range(pickler._BATCHSIZE):
            if not ahead:
                break
            key, value = ahead.pop(0)
            ahead.extend(islice(items, 2 - len(ahead)))
            pickler.save(key)
            pickler.save(value)
        pickler.write(pickle.SETITEM if single else pickle.SETITEMS)


class _LeanPickler(DcpMetadataPickler):
    """`DcpMetadataPickler` whose memo forgets what only the memo still holds."""

    # pickle._Pickler's; typeshed does not declare them
    memo: dict[int, tuple[int, Any]]  # id -> (index, the object)
    save: Callable[[Any], None]
    _BATCHSIZE: int
    dispatch: ClassVar[dict[type, Callable[..., None]]] = {
        **DcpMetadataPickler.dispatch,
        StreamedDict: _save_streamed,
    }

    def __init__(self, file: io.BufferedIOBase):
        super().__init__(file)
        self._next_index = 0
        self._unswept: list[int] = []  # ids memoized since the last sweep

    def memoize(self, obj: Any) -> None:
        # pickle._Pickler numbers entries by len(memo), which shrinks here: count instead.
        index, self._next_index = self._next_index, self._next_index + 1
        self.write(self.put(index))  # type: ignore[attr-defined]
        self.memo[id(obj)] = index, obj
        self._unswept.append(id(obj))
        if len(self._unswept) >= _SWEEP_EVERY:
            self._sweep()

    def _sweep(self) -> None:
        """Drop the entries of objects only the memo holds, and of those a `Metadata` never
        holds twice; the others (strings, sizes, classes, held by the `Metadata` or by a
        reducer still running) stay for good: each is looked at once. Those never held
        twice go first: an entry is memoized before its state, and while memoized it holds
        its sizes (a streamed entry, once written, is held by nothing else). Then newest
        first: a tuple is memoized after what it holds, and dropping it first leaves its
        parts to the memo alone (the state tuple of a `TensorProperties`)."""
        shared = []
        for key in self._unswept:
            if _never_shared(self.memo[key][1]):
                del self.memo[key]
            else:
                shared.append(key)
        for key in reversed(shared):
            obj = self.memo[key][1]
            if sys.getrefcount(obj) <= _MEMO_ONLY + 1:  # + `obj`
                del self.memo[key]
        self._unswept.clear()


def _never_shared(obj: Any) -> bool:
    """An object a `Metadata` holds in one place at most: an entry (one of
    `_ENTRY_CLASSES`), its state dict or its chunk list. What is shared between entries is a key,
    a file name, a size (an alias's entry holds its target's) or a class. Were one of these
    held twice after all, its second occurrence would be pickled in full, not as a `GET`:
    the same values, a few more bytes."""
    return type(obj) in (dict, list) or isinstance(obj, _ENTRY_CLASSES)


class _HashedFile(io.RawIOBase):
    """The raw side of the buffered file: whole buffers are written and hashed here."""

    def __init__(self, fd: int, digest: Digest | None):
        self.fd, self._digest, self.size = fd, digest, 0

    def release(self) -> None:
        """Close the descriptor; a buffer flushed later (as the buffered file is collected)
        then fails instead of writing into whatever file reuses the number."""
        fd, self.fd = self.fd, -1
        os.close(fd)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.fd < 0:  # the write failed and its descriptor is closed: write nothing more
            raise ValueError("the file is closed")
        view = memoryview(data).cast("B")
        if self._digest is not None:
            self._digest.update(view)
        pwrite_all(self.fd, view, self.size)
        self.size += len(view)
        return len(view)


def write_metadata(metadata: dcp_metadata.Metadata, path: Path, hashed: bool) -> FileRecord | None:
    """Pickle `metadata` into a new file at `path` and fsync it; its FileRecord when
    `hashed`. A failure removes what was written of it."""
    digest = Digest() if hashed else None
    raw = _HashedFile(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666), digest)
    try:
        buffered = io.BufferedWriter(raw, _BUFFER_BYTES)
        _LeanPickler(buffered).dump(metadata)
        buffered.flush()
        os.fsync(raw.fd)
    except BaseException as err:
        raw.release()
        path.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise naming_file(err, path) from None
        raise
    raw.release()
    return digest.record(raw.size) if digest is not None else None
