"""The search of a `.metadata` for megatron-core's signs (`is_unfinished_torch_dist`) is
bounded: a file over the DCP reader's MAX_METADATA_BYTES is not searched (the reader
refuses it, naming its size), and a file within it is searched holding a chunk, not the
file.

Was: the whole file was mapped and searched before any size check, so a sparse 8 GiB
`.metadata` took ~25 s and 8.4 GB of resident pages per search (`ckpt validate` searches
a few times) before the 1 GiB limit refused it; a SavePlan global in such a file named it
an unfinished save instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mfsdp_ckpt.format.dcp_metadata import MAX_METADATA_BYTES
from mfsdp_ckpt.format.unfinished_torch_dist import is_unfinished_torch_dist
from tests.support.interop_layouts import run_cli

REPO = Path(__file__).resolve().parents[2]
# protocol 0-3's GLOBAL of torch's SavePlan: a sign of megatron-core's save
SAVE_PLAN_GLOBAL = b"ctorch.distributed.checkpoint.planner\nSavePlan\n"
COMMON_STATE = b"\x8c\x16common_state/shard_0_1\x94"  # SHORT_BINUNICODE, MEMOIZE


def _sparse_step(step: Path, size: int, sign: bytes, at: int) -> Path:
    """A step dir of one `.distcp` and a sparse `.metadata` of `size` bytes holding `sign`
    at byte `at`."""
    step.mkdir(parents=True)
    (step / "__0_0.distcp").touch()
    with open(step / ".metadata", "wb") as handle:
        handle.truncate(size)
        handle.seek(at)
        handle.write(sign)
    return step


def test_a_metadata_over_the_limit_is_not_searched_and_its_size_is_refused(tmp_path):
    step = _sparse_step(tmp_path / "iter_0000001", MAX_METADATA_BYTES + 1, SAVE_PLAN_GLOBAL, 0)
    assert not is_unfinished_torch_dist(step, sorted(os.listdir(step)))
    code, out, err = run_cli("ckpt", "validate", step)
    refused = f"{MAX_METADATA_BYTES + 1} bytes, more than the {MAX_METADATA_BYTES} DCP metadata"
    assert code == 1 and refused in out and "did not finish" not in out + err, (out, err)


# The search run with its address space capped a little above what the process has mapped:
# holding the file (a mapping of it, or its bytes) is refused, holding a few chunks is not
PROBE = """
import os, resource, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from mfsdp_ckpt.format.unfinished_torch_dist import is_unfinished_torch_dist
step = Path(sys.argv[2])
mapped = next(line for line in open("/proc/self/status") if line.startswith("VmSize:"))
room = int(mapped.split()[1]) * 1024 + (96 << 20)
resource.setrlimit(resource.RLIMIT_AS, (room, resource.getrlimit(resource.RLIMIT_AS)[1]))
print(is_unfinished_torch_dist(step, sorted(os.listdir(step))))
"""


def test_a_metadata_within_the_limit_is_searched_holding_a_chunk(tmp_path):
    """A 160 MiB file whose sign crosses the border of two chunks near its end is named,
    searched in 96 MiB of address space."""
    size = 160 << 20
    step = _sparse_step(tmp_path / "iter_0000001", size, COMMON_STATE, size - (8 << 20) - 10)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO), str(step)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.split() == ["True"], done
