"""What checking each tensor record's CRC costs `validate --deep` on a ~1 GiB checkpoint.

Two bare DCPs (no manifest, as verl, Megatron-LM and torchtitan save) of the same tensors:
one saved with the CRC torch.save writes for each record, one with
`torch.serialization.set_crc32_options(False)` (each CRC written as 0, which --deep reads
unchecked). Their deep value reads (`check_values`: every byte a window at a time, NaN/Inf
counted) differ only by the CRC, so the difference is its cost. Each is read once first, so
both are timed from the page cache (the disk's speed would hide the CPU's cost).

    python bench/deep_crc.py --dir /tmp/deep_crc --gib 1 --repeat 3

Prints a markdown table (best of `--repeat`, GB = 1e9 bytes) and one JSON line per row.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mfsdp_ckpt.check.report import ValidationReport
from mfsdp_ckpt.check.storage_checks import check_values
from mfsdp_ckpt.storage.reader import CheckpointReader

TENSOR_MIB = 64  # each tensor's size: every one read by windows


def save(root: Path, gib: float, crc: bool) -> Path:
    """A bare DCP of `gib` GiB of float32 weights, each record's CRC written or not."""
    shutil.rmtree(root, ignore_errors=True)
    count = max(1, int(gib * 1024 / TENSOR_MIB))
    gen = torch.Generator().manual_seed(0)
    state = {f"layer{i}.weight": torch.randn(TENSOR_MIB << 18, generator=gen) for i in range(count)}
    torch.serialization.set_crc32_options(crc)
    try:
        dcp.save(state, checkpoint_id=str(root), no_dist=True)
    finally:
        torch.serialization.set_crc32_options(True)
    return root


def deep_read_seconds(root: Path, repeat: int) -> float:
    """Best wall time of `check_values` over every tensor; an error found fails the bench."""
    times = []
    for _ in range(repeat + 1):  # the first read fills the page cache, left out
        reader = CheckpointReader(root)
        report = ValidationReport(str(root))
        start = time.perf_counter()
        check_values(reader, report, None)
        times.append(time.perf_counter() - start)
        assert not report.findings, report.findings
    return min(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for crc in (False, True):
        root = save(args.dir / ("crc" if crc else "no_crc"), args.gib, crc)
        nbytes = sum(p.stat().st_size for p in root.glob("*.distcp"))
        seconds = deep_read_seconds(root, args.repeat)
        rows.append({"crc_written": crc, "bytes": nbytes, "seconds": seconds})
        shutil.rmtree(root)
    base = rows[0]["seconds"]
    print("| CRC written | data GB | deep read s | GB/s | vs no CRC |")
    print("|---|---|---|---|---|")
    for row in rows:
        gbs = row["bytes"] / row["seconds"] / 1e9
        row["gb_per_s"], row["ratio"] = gbs, row["seconds"] / base
        print(
            f"| {'yes' if row['crc_written'] else 'no (0)'} | {row['bytes'] / 1e9:.2f} |"
            f" {row['seconds']:.2f} | {gbs:.2f} | {row['ratio']:.2f}x |"
        )
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
