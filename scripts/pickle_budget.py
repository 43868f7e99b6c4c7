#!/usr/bin/env python
"""Reproduce the numbers behind the restricted unpickler's limits.

    python scripts/pickle_budget.py

1. Memory each opcode can retain: floods of the cheapest object-making opcodes (EMPTY_DICT,
   EMPTY_LIST, MARK, NEWOBJ of an admitted record) read by `load_plain_metadata_bytes`,
   each in a fresh process, peak RSS growth divided by the opcode count. The worst bounds
   DEFAULT_MAX_OPS (mfsdp_ckpt/format/restricted_pickle.py) so that a refused flood stays < 1 GiB.
2. What a real DCP `.metadata` costs per chunk: bytes and opcodes of a pickled Metadata of
   100 tensors x 64 chunks, as DCP writes it (MAX_METADATA_BYTES, dcp_metadata.py).
"""

from __future__ import annotations

import pickle
import pickletools
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOOD_OPS = 2_000_000
RECORD = b"ctorch.distributed.checkpoint.metadata\nBytesStorageMetadata\nq\x00"
FLOODS = {"EMPTY_DICT": b"}", "EMPTY_LIST": b"]", "MARK": b"(", "NEWOBJ": b"h\x00)\x81"}

PROBE = r"""
import resource, sys
sys.path.insert(0, sys.argv[1])
from mfsdp_ckpt.format.dcp_metadata import load_plain_metadata_bytes
data = open(sys.argv[2], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_plain_metadata_bytes(data)
except Exception:
    pass
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def bytes_per_opcode(name: str, body: bytes, scratch: Path) -> float:
    prefix = b"\x80\x02" + (RECORD if name == "NEWOBJ" else b"")
    ops_per_body = sum(1 for _ in pickletools.genops(prefix + body + b".")) - sum(
        1 for _ in pickletools.genops(prefix + b".")
    )
    count = FLOOD_OPS // ops_per_body
    path = scratch / f"{name}.pkl"
    path.write_bytes(prefix + body * count + b".")
    grew = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO), str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[-1]
    ops = sum(1 for _ in pickletools.genops(path.read_bytes()))
    return int(grew) / ops


def metadata_per_chunk() -> tuple[float, float]:
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        StorageMeta,
        TensorProperties,
        TensorStorageMetadata,
    )

    state, storage, chunks_total = {}, {}, 0
    for t in range(100):
        name = f"optimizer.state.model.layers.{t}.mlp.weight.exp_avg"
        chunks = [
            ChunkStorageMetadata(torch.Size([r * 8, 0]), torch.Size([8, 4096])) for r in range(64)
        ]
        state[name] = TensorStorageMetadata(
            TensorProperties(dtype=torch.float32), torch.Size([512, 4096]), chunks
        )
        for r, chunk in enumerate(chunks):
            storage[MetadataIndex(name, chunk.offsets, r)] = _StorageInfo(
                f"__{r}_0.distcp", 12345678, 131072
            )
        chunks_total += len(chunks)
    metadata = Metadata(
        state,
        planner_data={k: tuple(k.split(".")) for k in state},
        storage_data=storage,
        storage_meta=StorageMeta(),
    )
    data = pickle.dumps(metadata)
    return len(data) / chunks_total, sum(1 for _ in pickletools.genops(data)) / chunks_total


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        for name, body in FLOODS.items():
            print(
                f"{name:<11} flood: {bytes_per_opcode(name, body, Path(scratch)):.0f} bytes "
                "retained per opcode"
            )
    size, ops = metadata_per_chunk()
    print(f"DCP .metadata: {size:.0f} bytes and {ops:.0f} opcodes per chunk")


if __name__ == "__main__":
    main()
