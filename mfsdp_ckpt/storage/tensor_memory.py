"""Out of memory while a tensor is read or converted: one line naming it, not a traceback.

torch reports a failed CPU allocation as a plain RuntimeError ("DefaultCPUAllocator: can't
allocate memory: you tried to allocate 4294967296 bytes") and Python as a bare MemoryError;
raised deep inside a read, either says neither which tensor it was nor why it needed that
much. Export streams the tensors it can (dim-0 slabs that keep their name, `export_stream`)
a bounded piece at a time; any other tensor, and every tensor `validate --deep` reads, is
held whole, so a process with less memory (or address space: `ulimit -v`) than its bytes
cannot take it. That is this error, naming the tensor and the bytes it needs.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from mfsdp_ckpt.check.printable import said_by
from mfsdp_ckpt.errors import MfsdpError, MfsdpFailedError

# What torch's allocators say when they fail (CPU on Linux / Windows; CUDA, whose
# torch.OutOfMemoryError is a RuntimeError too). Any other RuntimeError is not this.
_ALLOCATOR_SIGNS = (
    "can't allocate memory",
    "not enough memory",
    "out of memory",
)
# What a thread whose stack cannot be mapped (a worker pool under `ulimit -v`) says, in
# whatever error its library raises: Python's RuntimeError, pyarrow's plain ArrowException
# (its decode pool, which a parquet read starts; it was reported as a damaged file). The
# message starts with it: one that quotes it further on (a duplicate key or column named
# so, in the project's own line about it) is not this.
_THREAD_SIGNS = (
    "can't start new thread",
    "failed to launch worker thread",
)
# How the dynamic loader words a shared library it could not map into memory: the first
# `import torch` or numpy (its OpenBLAS) under an address-space limit (`ulimit -v`) or with
# the machine's memory spent.
_UNMAPPED_LIBRARY = "failed to map segment from shared object"


class TensorMemoryError(MfsdpFailedError):
    """A tensor could not be held in memory (exit 1); the message names it and its bytes."""


def is_allocation_failure(err: BaseException) -> bool:
    """Whether `err` is an allocation failing: MemoryError, an OSError of ENOMEM (mmap,
    a file mapped), torch's allocator error, or a thread that could not be started. The
    project's own errors never are: their lines quote the input (keys, names, values)."""
    if isinstance(err, MemoryError):
        return True
    if isinstance(err, OSError):
        return err.errno == errno.ENOMEM
    if isinstance(err, MfsdpError):
        return False
    said = said_by(err).lower()
    if said.lstrip().startswith(_THREAD_SIGNS):
        return True
    return isinstance(err, RuntimeError) and any(sign in said for sign in _ALLOCATOR_SIGNS)


def memory_failure(err: BaseException) -> BaseException | None:
    """The error deepest in `err`'s chain (it, then what caused it) that is memory running
    out: an allocation failing (`is_allocation_failure`), or an import whose shared library
    could not be mapped; None when none is. The one test of what running out of memory
    looks like: code that turns a library's errors into "this file is damaged" lets these
    pass, for the machine, not the file, failed. numpy wraps an unmapped library in two
    ImportErrors of advice on reinstalling it (quoting it), and transformers an import that
    failed so in its own ImportError: a traceback, or a file blamed, hid that the machine,
    not the installation or the file, had failed."""
    found: BaseException | None = None
    seen: set[int] = set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        unmapped = isinstance(link, ImportError) and _UNMAPPED_LIBRARY in said_by(link)
        if unmapped or is_allocation_failure(link):
            found = link
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    return found


def reraise_if_out_of_memory(err: BaseException) -> None:
    """Raise `err` again where `memory_failure` finds memory running out in it: the first
    line of each `except Exception` that turns a library's error into "this file is damaged",
    for the machine, not the file, failed."""
    if memory_failure(err) is not None:
        raise err


@contextmanager
def tensor_memory(where: str, nbytes: int, doing: str = "reading it") -> Iterator[None]:
    """Turn an allocation failing inside the block into TensorMemoryError: `where` names the
    tensor (its file, or the checkpoint, and its key), `nbytes` what it holds whole."""
    try:
        yield
    except (MemoryError, RuntimeError) as err:
        if not is_allocation_failure(err):
            raise
        raise TensorMemoryError(
            f"{where}: out of memory {doing} ({nbytes} bytes, {nbytes / 2**30:.2f} GiB, held"
            " whole); free memory or raise the process's limit (ulimit -v), or run this on a"
            " machine with more"
        ) from None


__all__ = ["TensorMemoryError", "is_allocation_failure", "memory_failure", "tensor_memory"]
