"""The manifest's digests on this CPU: GB/s of each algorithm mfsdp_ckpt/format/file_hash.py
knows, on bytes in memory, one thread and two threads at once.

One thread is the cost per byte a save or an import pays on top of writing it. Two threads
(each hashing its own buffer through file_hash.Digest, as import's data-file threads do)
show whether the hash releases the GIL: if it did not, two threads would take twice as long
as one for twice the bytes, and the aggregate GB/s would not grow.

    python bench/file_hash.py --mib 512 --repeat 5

Prints a markdown table (best of `--repeat` runs, GB = 1e9 bytes) and one JSON line per row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mfsdp_ckpt.format.file_hash import ALGORITHMS, Digest

PIECE_BYTES = 1 << 20  # as byte_copy.copy_hashed feeds the digest


def hash_buffer(algorithm: str, data: memoryview) -> None:
    digest = Digest(algorithm)
    for at in range(0, len(data), PIECE_BYTES):
        digest.update(data[at : at + PIECE_BYTES])
    digest.record(len(data))


def best_seconds(algorithm: str, buffers: list[memoryview], repeat: int) -> float:
    """Best wall time of `repeat` runs, each hashing every buffer in its own thread."""
    best = float("inf")
    for _ in range(repeat):
        threads = [threading.Thread(target=hash_buffer, args=(algorithm, b)) for b in buffers]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512, help="bytes per thread, in MiB")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    buffers = [memoryview(os.urandom(args.mib << 20)) for _ in range(2)]
    rows = []
    for algorithm in ALGORITHMS:
        for count in (1, 2):
            seconds = best_seconds(algorithm, buffers[:count], args.repeat)
            total = count * len(buffers[0])
            rows.append(
                {
                    "algorithm": algorithm,
                    "threads": count,
                    "gb": round(total / 1e9, 3),
                    "seconds": round(seconds, 3),
                    "gb_per_s": round(total / 1e9 / seconds, 2),
                }
            )
    print(f"cores available: {len(os.sched_getaffinity(0))}")
    print("| algorithm | threads | GB hashed | best s | GB/s (all threads) |")
    print("|---|---|---|---|---|")
    print("\n".join("| " + " | ".join(str(value) for value in row.values()) + " |" for row in rows))
    print("\n".join(json.dumps(row) for row in rows))


if __name__ == "__main__":
    main()
