"""Reading a large run's DCP `.metadata`: mfsdp's restricted reader against `pickle.loads`.

A Megatron-FSDP / verl checkpoint holds, for every tensor (model, Adam exp_avg and
exp_avg_sq, fp32 main params), one chunk per rank: a 70B model on 256-512 GPUs writes
0.5-1.5 million chunks. This builds such a `.metadata` with DCP's own classes (as
`dcp.save` pickles it: Metadata, TensorStorageMetadata with one ChunkStorageMetadata per
rank, one MetadataIndex -> _StorageInfo per chunk) and reads it, each reader in a fresh
process, reporting file size, opcode count, read time and the resident memory the result
holds (VmRSS after the read, result alive, minus before).

    python bench/dcp_metadata_read.py --tensors 2000 --ranks 100 --ranks 512

`pickle.loads` (the C unpickler, which runs any code a pickle names) is for reference only.
Prints a markdown table and one JSON line per row.
"""

from __future__ import annotations

import argparse
import json
import pickle
import pickletools
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = r"""
import pickle, sys, time
sys.path.insert(0, sys.argv[1])
import torch.distributed.checkpoint  # both readers need DCP's classes: imported before measuring
from mfsdp_ckpt.format.dcp_metadata import load_plain_metadata_bytes

def rss():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024

data = open(sys.argv[2], "rb").read()
before = rss()
start = time.perf_counter()
result = pickle.loads(data) if sys.argv[3] == "pickle.loads" else load_plain_metadata_bytes(data)
seconds = time.perf_counter() - start
print(seconds, rss() - before)  # the read's result is alive: the memory it holds
"""


def megatron_name(t: int) -> str:
    return f"optimizer.state.module.decoder.layers.{t // 8}.mlp.linear_fc{t % 8}.weight.exp_avg"


def build_metadata(
    tensors: int,
    ranks: int,
    *,
    dims: int = 2,
    name: Callable[[int], str] = megatron_name,
    shared_paths: bool = False,
    small_offsets: bool = False,
) -> bytes:
    """A pickled DCP Metadata made with DCP's own classes, as `dcp.save` pickles it:
    `tensors` fp32 tensors of `dims` dims (tensor t named `name(t)`), each split in `ranks` row
    chunks, one MetadataIndex -> _StorageInfo per chunk. `shared_paths`: the items of one
    rank's file share one file name object, as DCP's FileSystemWriter gives them (pickled
    once, then memoized); `small_offsets`: 8-byte blobs at small offsets (the most compact
    ints a pickle has: the most opcodes per byte)."""
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

    files = [f"__{r}_0.distcp" for r in range(ranks)]
    tail = [8192] * (dims - 1)
    state, storage = {}, {}
    for t in range(tensors):
        fqn = name(t)
        chunks = [
            ChunkStorageMetadata(torch.Size([r * 8] + [0] * (dims - 1)), torch.Size([8, *tail]))
            for r in range(ranks)
        ]
        state[fqn] = TensorStorageMetadata(
            TensorProperties(dtype=torch.float32), torch.Size([8 * ranks, *tail]), chunks
        )
        for r, chunk in enumerate(chunks):
            path = files[r] if shared_paths else f"__{r}_0.distcp"
            offset, length = (8 * t, 8) if small_offsets else (262144 * t, 262144)
            storage[MetadataIndex(fqn, chunk.offsets, r)] = _StorageInfo(path, offset, length)
    metadata = Metadata(
        state,
        planner_data={k: tuple(k.split(".")) for k in state},
        storage_data=storage,
        storage_meta=StorageMeta(checkpoint_id=Path("/checkpoints/run/iter_0000100")),
    )
    return pickle.dumps(metadata)


def read(path: Path, reader: str) -> tuple[float, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO), str(path), reader],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), int(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=2000)
    parser.add_argument("--ranks", type=int, action="append", help="repeatable; default 100")
    parser.add_argument("--readers", default="mfsdp,pickle.loads")
    args = parser.parse_args()
    print("| chunks | file MB | opcodes | reader | read s | RSS held MiB |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for ranks in args.ranks or [100]:
            data = build_metadata(args.tensors, ranks)
            path = Path(scratch) / "metadata"
            path.write_bytes(data)
            ops = sum(1 for _ in pickletools.genops(data))
            chunks = args.tensors * ranks
            del data
            for reader in args.readers.split(","):
                try:
                    seconds, grew = read(path, reader)
                except subprocess.CalledProcessError as err:
                    seconds, grew = float("nan"), 0
                    reader += f" (refused: {err.stderr.strip().splitlines()[-1][:80]})"
                row = {
                    "chunks": chunks,
                    "file_mb": round(path.stat().st_size / 1e6, 1),
                    "opcodes": ops,
                    "reader": reader,
                    "read_s": round(seconds, 2),
                    "rss_mib": round(grew / 2**20),
                }
                print("| " + " | ".join(str(v) for v in row.values()) + " |")
                print(json.dumps(row), file=sys.stderr)


if __name__ == "__main__":
    main()
