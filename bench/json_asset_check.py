"""What the JSON asset check (`check_json_asset`, mfsdp_ckpt/convert/export_source.py) costs
on a large tokenizer.json, against one plain `json.loads` of the same bytes: the check every
model and tokenizer dir's JSON files pass before a run, an import or an export.

Each file is a valid BPE tokenizer.json padded with a vocab and merges to within budgets of
8, 32 and 64 MiB (64 MiB is MAX_JSON_ASSET_BYTES, the most an asset may have: 7.6, 30 and
59 MiB as built), and two invalid ones of the same size, each with one bad value at the
end: a NaN id (refused as not finite) and a vocab key given twice (refused as a duplicate
key).

    python bench/json_asset_check.py --repeat 3

Prints a markdown table (best of `--repeat` runs, in CPU seconds of this process, which
other work on the machine sways far less than wall time; MiB = 2**20 bytes) and one JSON
line per row.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mfsdp_ckpt.convert.export_source import MAX_JSON_ASSET_BYTES, check_json_asset
from mfsdp_ckpt.storage.byte_store import CheckpointFileError

SIZES_MIB = (8, 32, 64)
MERGE_SHARE = 0.4  # of the bytes, as merges (each an array: a real tokenizer.json's share)
ENTRY_BYTES = 24  # about what one vocab entry or merge takes, for the counts
PAD = "x" * 8  # each vocab entry's text after its number
ENDINGS = {
    "valid": b"",
    "NaN at the end": b', "tok-nan": NaN',
    "key twice at the end": f', "tok0-{PAD}": 1'.encode(),  # the vocab's first key again
}


def tokenizer_json(mib: int, ending: bytes) -> bytes:
    """A BPE tokenizer.json of about `mib` MiB (at most MAX_JSON_ASSET_BYTES), `ending`
    added as the vocab's last entries."""
    budget = min(mib << 20, MAX_JSON_ASSET_BYTES) - 4096
    merges = int(budget * MERGE_SHARE) // ENTRY_BYTES
    vocab: dict[str, int] = {}
    text = b""
    entries = (budget - merges * ENTRY_BYTES) // ENTRY_BYTES
    while True:
        vocab.update({f"tok{i}-{PAD}": i for i in range(len(vocab), entries)})
        model = {
            "type": "BPE",
            "vocab": vocab,
            "merges": [[f"tok{i}", f"-{PAD}"] for i in range(merges)],
        }
        document = {"version": "1.0", "added_tokens": [], "model": model}
        text = json.dumps(document).encode()
        if len(text) + len(ending) <= budget:
            break
        entries -= (len(text) + len(ending) - budget) // ENTRY_BYTES + 1
        vocab = {}
    at = text.index(b'}, "merges"')  # the vocab's closing brace
    return text[:at] + ending + text[at:]


def best_seconds(run: Callable[[], object], repeat: int) -> tuple[float, object]:
    """The least CPU time of `repeat` calls of `run`, and what it returned."""
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.process_time()
        result = run()
        best = min(best, time.process_time() - started)
    return best, result


def checked(data: bytes) -> str:
    """The check's outcome: "passes", or its refusal line (the file named `tokenizer.json`)."""
    try:
        check_json_asset("tokenizer.json", "tokenizer.json", data)
    except CheckpointFileError as err:
        return str(err)
    return "passes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| MiB | tokenizer.json | json.loads CPU s | check CPU s | check / loads | outcome |")
    print("|---:|---|---:|---:|---:|---|")
    lines = []
    for mib in SIZES_MIB:
        for name, ending in ENDINGS.items():
            data = tokenizer_json(mib, ending)
            loads, _parsed = best_seconds(lambda: json.loads(data), args.repeat)
            check, outcome = best_seconds(lambda: checked(data), args.repeat)
            row = {
                "mib": round(len(data) / (1 << 20), 1),
                "file": name,
                "json_loads_s": round(loads, 2),
                "check_s": round(check, 2),
                "ratio": round(check / loads, 2),
                "outcome": outcome,
            }
            print(
                f"| {row['mib']} | {name} | {row['json_loads_s']} | {row['check_s']} |"
                f" {row['ratio']} | {outcome} |"
            )
            lines.append(json.dumps(row))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
