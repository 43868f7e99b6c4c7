"""Count NaN/Inf in raw little-endian tensor bytes in a file, a bounded piece at a time.

export-hf and import-hf copy most tensors file to file in the kernel, so their bytes never
become a torch tensor; a diverged run's NaN must still stop them. Counting on the mapped
bytes needs neither torch nor a copy, and reads the pages into the cache the copy then
uses: numpy's isfinite for the types it has; for bfloat16, all exponent bits set (Inf or
NaN). Integer tensors hold no NaN; fp8 formats are not checked.
"""

from __future__ import annotations

import mmap

from mfsdp_ckpt.format.dtypes import DType

_NUMPY_FLOATS = {"float64": "<f8", "float32": "<f4", "float16": "<f2"}
_BF16_EXPONENT = 0x7F80
PIECE_ELEMENTS = 1 << 20  # elements mapped and counted at a time


def is_checked(dtype: DType) -> bool:
    """Whether `count_nonfinite` can tell NaN/Inf in this dtype's bytes."""
    return dtype.name in _NUMPY_FLOATS or dtype.name == "bfloat16"


def count_nonfinite(data: memoryview, dtype: DType) -> int:
    """NaN/Inf among the raw elements in `data` (0 for a dtype `is_checked` refuses)."""
    import numpy as np

    if dtype.name in _NUMPY_FLOATS:
        values = np.frombuffer(data, dtype=_NUMPY_FLOATS[dtype.name])
        return 0 if np.isfinite(values).all() else int(np.count_nonzero(~np.isfinite(values)))
    if dtype.name == "bfloat16":
        exponent = np.frombuffer(data, dtype="<u2") & np.uint16(_BF16_EXPONENT)
        return int(np.count_nonzero(exponent == _BF16_EXPONENT))
    return 0


def count_nonfinite_in_file(fd: int, offset: int, numel: int, dtype: DType) -> int:
    """NaN/Inf among `numel` raw `dtype` elements at byte `offset` of the file `fd`, mapped
    PIECE_ELEMENTS at a time (memory stays bounded whatever the tensor's size)."""
    if numel == 0 or not is_checked(dtype):
        return 0
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    length = offset + numel * dtype.itemsize - start
    with mmap.mmap(fd, length, prot=mmap.PROT_READ, offset=start) as mapped:
        view, step = memoryview(mapped), PIECE_ELEMENTS * dtype.itemsize
        try:
            return sum(
                count_nonfinite(view[first : min(first + step, length)], dtype)
                for first in range(offset - start, length, step)
            )
        finally:
            view.release()
