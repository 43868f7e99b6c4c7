"""What a column the run never reads costs when the training data is loaded: the peak RSS
of the GRPO prompt load (`load_rl_prompts`, what `mfsdp train grpo` calls) and of the SFT
row read (`read_rows_with_origins` through SFT's columns), each in a fresh process, on a
table with and without an unread `pages` column (one list of `--blob-bytes` random bytes a
row, stored as a verl multimodal parquet keeps its images: an `images` column itself is
refused, trainer/data/media_columns.py).

The GRPO table holds verl's gsm8k columns (`prompt`, `data_source`, `ability`,
`reward_model`, `extra_info`), each prompt made unique; the SFT table holds a two-turn
`messages` chat a row.

    python bench/data_unread_columns.py --rows 60000 --blob-bytes 10000
    python bench/data_unread_columns.py --rows 60000 --blob-bytes 10000 --repo OTHER_CHECKOUT

`--repo`: measure another checkout's loader on the same tables (to compare with an older
one). Prints a markdown table (MiB = 2**20 bytes) and one JSON line per row.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUESTION = "Tom has 25 apples and buys 49 more. How many apples?"
PROMPT_END = ' Let\'s think step by step and output the final answer after "####".'

# Run in a fresh process: its peak RSS is the load's alone (tokenizer built first).
_LOAD = """
import resource, sys
sys.path.insert(0, sys.argv[1])
from trainer.tiny import build_tokenizer
tokenizer = build_tokenizer()
kind, path = sys.argv[2], sys.argv[3]
if kind == "grpo":
    from trainer.grpo.config import RLDataConfig
    from trainer.grpo.data import load_rl_prompts
    count = len(load_rl_prompts([path], RLDataConfig(max_prompt_length=512), tokenizer)[0])
else:
    from trainer.data.chat import TEMPLATE_COLUMNS
    from trainer.data.files import read_rows_with_origins
    read = ("messages", "prompt", "response", *TEMPLATE_COLUMNS)
    count = len(read_rows_with_origins([path], read)[0])
print(count, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def rl_row(index: int) -> dict:
    """A verl gsm8k RL row, its prompt made unique."""
    unique = base64.b64encode(os.urandom(30)).decode()
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": f"{QUESTION}{PROMPT_END} {unique}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "74"},
        "extra_info": {"split": "train", "index": index, "question": unique},
    }


def sft_row(index: int) -> dict:
    return {
        "messages": [
            {"role": "user", "content": f"{QUESTION} ({index})"},
            {"role": "assistant", "content": "He has 25+49=74 apples.\n#### 74"},
        ]
    }


def write_pair(folder: Path, name: str, rows: list[dict], blob_bytes: int) -> None:
    """`name`_without.parquet (the rows) and `name`_with.parquet (the rows and `pages`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    without, with_images = folder / f"{name}_without.parquet", folder / f"{name}_with.parquet"
    pq.write_table(pa.Table.from_pylist(rows), without)
    images = [[{"bytes": os.urandom(blob_bytes)}] for _ in rows]
    pq.write_table(pa.Table.from_pylist(rows).append_column("pages", pa.array(images)), with_images)


def write_tables(folder: Path, rows: int, blob_bytes: int) -> None:
    """The GRPO and the SFT pair of tables, written by a process of its own: a process
    started by one keeps its peak RSS as its own (Linux's ru_maxrss survives exec)."""
    for kind, make in (("grpo", rl_row), ("sft", sft_row)):
        write_pair(folder, kind, [make(index) for index in range(rows)], blob_bytes)


def peak(repo: Path, kind: str, path: Path) -> tuple[int, float]:
    """(rows loaded, peak RSS MiB) of loading `path` in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", _LOAD, str(repo), kind, str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    count, mib = done.stdout.split()[-2:]
    return int(count), float(mib)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--blob-bytes", type=int, default=10000)
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose loader runs")
    parser.add_argument("--write", type=Path, help=argparse.SUPPRESS)  # the tables' process
    args = parser.parse_args()
    if args.write is not None:
        write_tables(args.write, args.rows, args.blob_bytes)
        return
    print("| load | pages column | file MiB | rows | peak RSS MiB |")
    print("|---|---|---|---|---|")
    lines = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        sizes = ["--rows", str(args.rows), "--blob-bytes", str(args.blob_bytes)]
        subprocess.run([sys.executable, __file__, *sizes, "--write", scratch], check=True)
        for kind in ("grpo", "sft"):
            for images, name in (("no", "without"), ("yes", "with")):
                path = folder / f"{kind}_{name}.parquet"
                count, mib = peak(args.repo, kind, path)
                size = path.stat().st_size / 2**20
                print(f"| {kind} | {images} | {size:.0f} | {count} | {mib:.0f} |", flush=True)
                line = {"load": kind, "images": images, "file_mib": round(size, 1)}
                lines.append({**line, "rows": count, "peak_rss_mib": round(mib)})
    for line in lines:
        print(json.dumps(line))


if __name__ == "__main__":
    main()
