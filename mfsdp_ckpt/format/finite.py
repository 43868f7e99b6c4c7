"""Count NaN/Inf in raw little-endian tensor bytes in a file, a bounded piece at a time.

export-hf and import-hf copy most tensors file to file in the kernel, so their bytes never
become a torch tensor; a diverged run's NaN must still stop them. Counting on bytes read
a piece at a time needs no torch, and reads the pages into the cache the copy then uses:
numpy's isfinite for the types it has; for bfloat16, all exponent bits set (Inf or
NaN); for the one-byte float formats, their NaN/Inf bit patterns (torch has no isinf for
most of them, so tensors of those dtypes are counted here too). Integer tensors hold no NaN.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.removed_while_read import shrank_while_read
from mfsdp_ckpt.format.dtypes import DType

if TYPE_CHECKING:  # validate counts raw bytes without torch; only the tensor counts need it
    import torch

_NUMPY_FLOATS = {"float64": "<f8", "float32": "<f4", "float16": "<f2"}
_BF16_EXPONENT = 0x7F80
# One-byte float formats: (mask, value) such that byte & mask == value is NaN or Inf. The
# OCP fp8 e4m3fn has NaN only at S.1111.111; e5m2 is IEEE-like (exponent all ones); the
# "fnuz" formats and e8m0 have one NaN pattern. float4_e2m1fn_x2 (two values a byte) has
# neither.
_BYTE_NONFINITE = {
    "float8_e4m3fn": (0x7F, 0x7F),
    "float8_e5m2": (0x7C, 0x7C),
    "float8_e4m3fnuz": (0xFF, 0x80),
    "float8_e5m2fnuz": (0xFF, 0x80),
    "float8_e8m0fnu": (0xFF, 0xFF),
    "float4_e2m1fn_x2": (0x00, 0x01),  # never equal: no NaN or Inf to encode
}
PIECE_ELEMENTS = 1 << 20  # elements read and counted at a time


def is_checked(dtype: DType) -> bool:
    """Whether `count_nonfinite` can tell NaN/Inf in this dtype's bytes."""
    return dtype.name in _NUMPY_FLOATS or dtype.name == "bfloat16" or dtype.name in _BYTE_NONFINITE


def count_nonfinite(data: memoryview, dtype: DType) -> int:
    """NaN/Inf among the raw elements in `data` (0 for a dtype `is_checked` refuses)."""
    import numpy as np

    if dtype.name in _NUMPY_FLOATS:
        values = np.frombuffer(data, dtype=_NUMPY_FLOATS[dtype.name])
        return 0 if np.isfinite(values).all() else int(np.count_nonzero(~np.isfinite(values)))
    if dtype.name == "bfloat16":
        exponent = np.frombuffer(data, dtype="<u2") & np.uint16(_BF16_EXPONENT)
        return int(np.count_nonzero(exponent == _BF16_EXPONENT))
    if dtype.name in _BYTE_NONFINITE:
        mask, value = _BYTE_NONFINITE[dtype.name]
        return int(np.count_nonzero(np.frombuffer(data, dtype="u1") & np.uint8(mask) == value))
    return 0


def count_nonfinite_tensor(tensor: torch.Tensor) -> int:
    """NaN/Inf in a torch tensor of any dtype (0 for integers), counted on the tensor's own
    device a piece at a time: a mask of the whole tensor took a quarter of its bytes more,
    and a tensor that just fit failed validate --deep. torch.isfinite has no kernel for
    most one-byte float formats (a Megatron fp8 run's weights); those are counted from
    their NaN/Inf bit patterns, with torch too: copied to the CPU for numpy, a GPU
    tensor's whole bytes were held in host memory at once."""
    import torch

    if not tensor.is_floating_point():
        return 0
    pieces = tensor.detach().reshape(-1).split(PIECE_ELEMENTS)
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in _BYTE_NONFINITE:
        return sum(int((~piece.isfinite()).sum()) for piece in pieces)
    mask, value = _BYTE_NONFINITE[name]
    return sum(int(((piece.view(torch.uint8) & mask) == value).sum()) for piece in pieces)


def count_nan_tensor(tensor: torch.Tensor) -> int:
    """NaN in a floating torch tensor with a kernel for isnan, a piece at a time."""
    return sum(
        int(piece.isnan().sum()) for piece in tensor.detach().reshape(-1).split(PIECE_ELEMENTS)
    )


def count_nonfinite_in_file(fd: int, offset: int, numel: int, dtype: DType) -> int:
    """NaN/Inf among `numel` raw `dtype` elements at byte `offset` of the file `fd`, read
    PIECE_ELEMENTS at a time into a buffer the thread keeps. The file is the user's: mapped,
    a page it lost to a truncation meanwhile killed the process with SIGBUS (no line, the
    export's temporary output left behind), which Python cannot catch; a read that comes up
    short is CheckpointRemovedError naming the file. A piece at a time: the whole tensor at
    once took its size in memory, and under `ulimit -v` one large tensor failed to export."""
    if numel == 0 or not is_checked(dtype):
        return 0
    end, step = offset + numel * dtype.itemsize, PIECE_ELEMENTS * dtype.itemsize
    buffer = _SCAN_BUFFER.at_least(min(step, end - offset))
    found = 0
    for first in range(offset, end, step):
        piece = buffer[: min(step, end - first)]
        _read_exactly(fd, piece, first, end)
        found += count_nonfinite(piece, dtype)
    return found


class _ScanBuffer(threading.local):
    """The bytes a thread's scan reads into, allocated once and reused: a fresh buffer per
    piece costs page faults that cost more than the read."""

    data: memoryview | None = None

    def at_least(self, size: int) -> memoryview:
        if self.data is None or len(self.data) < size:
            self.data = memoryview(bytearray(size))  # replaced, never resized: views may live on
        return self.data


_SCAN_BUFFER = _ScanBuffer()


def _read_exactly(fd: int, piece: memoryview, offset: int, needed: int) -> None:
    """Fill `piece` from byte `offset` of `fd`, whose size was checked to reach `needed`
    before the scan: ending sooner, it was truncated meanwhile."""
    done = 0
    while done < len(piece):
        count = os.preadv(fd, [piece[done:]], offset + done)
        if count <= 0:
            raise shrank_while_read(fd, needed)
        done += count
