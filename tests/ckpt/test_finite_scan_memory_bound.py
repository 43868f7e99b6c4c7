"""The NaN/Inf scan of a tensor's bytes in a file (`count_nonfinite_in_file`, run by export-hf,
import-hf and validate --deep) maps a bounded window at a time. It mapped the whole tensor:
under `ulimit -v` export-hf of a checkpoint with one 1 GB tensor failed with ENOMEM."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys

import numpy as np
import pytest

from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.format.finite import PIECE_ELEMENTS, count_nonfinite, count_nonfinite_in_file
from tests.support.paths import REPO

HEADROOM = 96 << 20  # address space the scan may add: windows fit, the whole tensor does not
NUMEL = 64 << 20  # float32 elements: 256 MiB

# Caps the address space at what the process holds once ready plus HEADROOM, shows a map of
# the whole tensor is refused under that cap, then scans the tensor under it.
_CAPPED_SCAN = """
import errno, mmap, os, resource, sys
from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.format.finite import count_nonfinite_in_file
path, offset, numel, headroom = sys.argv[1], *map(int, sys.argv[2:])
fd = os.open(path, os.O_RDONLY)
count_nonfinite_in_file(fd, 0, 16, BY_NAME["float32"])  # numpy's first call sets itself up
with open("/proc/self/status") as status:
    held = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (held + headroom, resource.RLIM_INFINITY))
try:
    mmap.mmap(fd, offset + numel * 4, prot=mmap.PROT_READ).close()
except OSError as err:
    print("whole map refused" if err.errno == errno.ENOMEM else err)
print(count_nonfinite_in_file(fd, offset, numel, BY_NAME["float32"]))
"""


# Caps the address space so that one window maps but numpy's mask of it (1 MiB) cannot be
# allocated, and prints the error the scan raises.
_SCAN_OUT_OF_MEMORY = """
import os, resource, sys
from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.format.finite import count_nonfinite_in_file
path, numel, headroom = sys.argv[1], *map(int, sys.argv[2:])
fd = os.open(path, os.O_RDONLY)
count_nonfinite_in_file(fd, 0, 16, BY_NAME["float32"])  # numpy's first call sets itself up
with open("/proc/self/status") as status:
    held = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (held + headroom, resource.RLIM_INFINITY))
try:
    count_nonfinite_in_file(fd, 20, numel, BY_NAME["float32"])
except BaseException as err:
    print(type(err).__name__)
"""


def _write_float32(path, offset: int, numel: int, values: dict[int, float]) -> None:
    """A sparse file whose float32 tensor at byte `offset` is zeros but for `values`."""
    with open(path, "wb") as handle:
        handle.truncate(offset + numel * 4)
        for index, value in values.items():
            handle.seek(offset + index * 4)
            handle.write(np.float32(value).tobytes())


def test_a_tensor_larger_than_the_address_space_left_is_scanned(tmp_path):
    offset = 4096 * 3 + 20  # neither page- nor window-aligned
    nonfinite = {0: np.nan, PIECE_ELEMENTS - 1: np.inf, NUMEL // 2: -np.inf, NUMEL - 1: np.nan}
    path = tmp_path / "big.bin"
    _write_float32(path, offset, NUMEL, nonfinite)
    done = subprocess.run(
        [sys.executable, "-c", _CAPPED_SCAN, str(path), str(offset), str(NUMEL), str(HEADROOM)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["whole map refused", str(len(nonfinite))], done.stdout


def test_running_out_of_memory_while_counting_is_the_memory_error(tmp_path):
    """numpy failing to allocate its mask came out as `BufferError: cannot close exported
    pointers exist` (the failed frames still held arrays over the map), a traceback instead
    of the one out-of-memory line."""
    numel = 2 * PIECE_ELEMENTS
    path = tmp_path / "t.bin"
    _write_float32(path, 20, numel, {})
    headroom = PIECE_ELEMENTS * 4 + mmap.ALLOCATIONGRANULARITY + (256 << 10)  # a window, no mask
    done = subprocess.run(
        [sys.executable, "-c", _SCAN_OUT_OF_MEMORY, str(path), str(numel), str(headroom)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["MemoryError"], done.stdout


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e5m2"])
@pytest.mark.parametrize("offset", [0, 7, 65536 + 3])
def test_windows_count_what_the_whole_bytes_hold(tmp_path, dtype, offset):
    """Every window boundary, and a start that is not aligned: the windows together count
    exactly what one pass over all the bytes counts."""
    record = BY_NAME[dtype]
    numel = 2 * PIECE_ELEMENTS + 5
    raw = np.random.default_rng(0).integers(0, 256, numel * record.itemsize, dtype=np.uint8)
    path = tmp_path / "t.bin"
    path.write_bytes(bytes(offset) + raw.tobytes() + bytes(11))
    fd = os.open(path, os.O_RDONLY)
    try:
        counted = count_nonfinite_in_file(fd, offset, numel, record)
    finally:
        os.close(fd)
    expected = count_nonfinite(memoryview(raw), record)
    assert expected > 0
    assert counted == expected
