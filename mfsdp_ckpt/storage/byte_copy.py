"""Move byte ranges between files in the kernel, hashing them on the way when asked.

`copy_file_range` moves bytes page cache to page cache without entering this process, the
cheapest copy there is (`pread` + `pwrite` through a buffer took several times the kernel
time on the 2-core machine). A manifest needs the digest of the bytes written: hashing a whole
file afterwards reads every byte back from DRAM, so `copy_hashed` copies a small piece at a time
and hashes that piece at once through a read-only mapping of the destination, while its
bytes are still in the CPU cache (no copy into this process either).
"""

from __future__ import annotations

import errno
import mmap
import os
from typing import Protocol

from mfsdp_ckpt.check.removed_while_read import shrank_while_read

_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}
# Copied, then hashed: small enough that the hash reads the piece from the CPU cache.
HASH_PIECE_BYTES = 1 << 20
_MAP_BYTES = 64 << 20
_BUFFER_BYTES = 8 << 20
_PWRITE_MAX = 1 << 30


class Digest(Protocol):
    def update(self, data: memoryview, /) -> None: ...


def pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of `data` at `offset` (pwrite may write less than asked)."""
    done = 0
    while done < len(data):
        count = os.pwrite(fd, data[done : done + _PWRITE_MAX], offset + done)
        if count <= 0:
            raise OSError(errno.EIO, f"pwrite stopped at {done} of {len(data)} bytes")
        done += count


def copy_bytes(src_fd: int, src_offset: int, dst_fd: int, dst_offset: int, length: int) -> None:
    """`length` bytes file to file, in the kernel where it can (no user-space copy), else
    through a bounded buffer (filesystems without copy_file_range)."""
    done = 0
    try:
        while done < length:
            count = os.copy_file_range(
                src_fd, dst_fd, length - done, src_offset + done, dst_offset + done
            )
            if count <= 0:  # the source ended: it was truncated after its size was checked
                raise shrank_while_read(src_fd, src_offset + length)
            done += count
        return
    except OSError as err:
        if err.errno not in _NO_KERNEL_COPY:
            raise
    while done < length:  # through a bounded buffer
        piece = os.pread(src_fd, min(_BUFFER_BYTES, length - done), src_offset + done)
        if not piece:
            raise shrank_while_read(src_fd, src_offset + length)
        pwrite_all(dst_fd, memoryview(piece), dst_offset + done)
        done += len(piece)


def copy_hashed(
    src_fd: int, src_offset: int, dst_fd: int, dst_offset: int, length: int, digest: Digest
) -> None:
    """`length` bytes file to file (`copy_bytes`), each piece of `HASH_PIECE_BYTES` fed to
    `digest` right after its copy. `dst_fd` must be open for reading too."""
    done = 0
    while done < length:
        count = min(HASH_PIECE_BYTES, length - done)
        copy_bytes(src_fd, src_offset + done, dst_fd, dst_offset + done, count)
        hash_file_range(dst_fd, dst_offset + done, dst_offset + done + count, digest)
        done += count


def hash_file_range(fd: int, start: int, end: int, digest: Digest) -> None:
    """Feed bytes [start, end) of an open file to `digest`, through read-only mappings of
    at most `_MAP_BYTES`: the page cache is hashed in place, and the mapped pages add at
    most one window to the RSS."""
    if os.fstat(fd).st_size < end:
        raise OSError(errno.EIO, f"file is shorter than the {end} bytes written")
    at = start
    while at < end:
        base = at - at % mmap.ALLOCATIONGRANULARITY
        stop = min(end, base + _MAP_BYTES)
        with mmap.mmap(fd, stop - base, prot=mmap.PROT_READ, offset=base) as mapped:
            view = memoryview(mapped)
            try:
                digest.update(view[at - base :])
            finally:
                view.release()
        at = stop
