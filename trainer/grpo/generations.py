"""A step's generations as JSONL, verl's `trainer.rollout_data_dir` and `validation_data_dir`.

verl (ray_trainer.py `_dump_generations`) writes DIR/<step>.jsonl, one line a sample:
`input` (the prompt, decoded without special tokens), `output` (the response, likewise),
`gts` (its ground truth), `score` (its reward), `step`, then the reward's extra values. Here
the extra values are `acc` (the accuracy `reward/accuracy` averages) and, for training
samples, `advantage` (the response's GRPO advantage, the same at each of its tokens). A
rollout-only record of what was trained on, with no other way to see it: metrics.jsonl holds
means.

Each rank holds its own share of the step's samples: they are gathered to rank 0 (rank
order), which alone writes the file, whole or not at all (`run_files.replacing`), so a crash
or full disk never leaves half a step, and a step trained again (a resume) replaces its file.

Each line is strict JSON (RFC 8259): a NaN or infinity (a parquet ground truth may hold one)
is written as null, where verl's `json.dumps` writes `NaN`, which Python reads but a strict
parser (JavaScript's JSON.parse, Go, serde_json, DuckDB) refuses, losing the whole line; bytes
are their UTF-8 text, else their bytes escaped as Python writes them (`\xff`), not `b'...'`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer.run_files import RunFileError, replacing


def generation_rows(
    step: int,
    inputs: Sequence[str],
    outputs: Sequence[str],
    ground_truths: Sequence[Any],
    scores: Sequence[float],
    accuracy: Sequence[float],
    advantages: Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """One JSON object a sample, verl's fields first."""
    rows = []
    for i, (prompt, response, truth, score, acc) in enumerate(
        zip(inputs, outputs, ground_truths, scores, accuracy, strict=True)
    ):
        row = dict(input=prompt, output=response, gts=truth, score=score, step=step, acc=acc)
        if advantages is not None:
            row["advantage"] = advantages[i]
        rows.append(row)
    return rows


def response_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> list[float]:
    """Each response's advantage: GRPO gives all its tokens one (their mean, 0 for none)."""
    mask = mask.to(advantages.dtype)
    return ((advantages * mask).sum(1) / mask.sum(1).clamp(min=1)).tolist()


def dump_generations(directory: str | Path, step: int, rows: list[dict[str, Any]]) -> None:
    """Write every rank's `rows` to `directory`/<step>.jsonl from rank 0 (a collective when
    a process group is initialized: every rank calls it)."""
    if dist.is_available() and dist.is_initialized():
        gathered: list[Any] = [None] * dist.get_world_size() if dist.get_rank() == 0 else []
        dist.gather_object(rows, gathered if dist.get_rank() == 0 else None, dst=0)
        if dist.get_rank() != 0:
            return
        rows = [row for part in gathered for row in part]
    target = Path(directory)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunFileError(f"{target}: cannot make the directory ({err.strerror or err})") from None
    lines = (json_line(row) for row in rows)
    with replacing(target / f"{step}.jsonl", "write the step's generations") as out:
        out.write("".join(lines).encode("utf-8"))


def json_line(row: dict[str, Any]) -> str:
    """`row` as one line of strict JSON (`allow_nan=False` holds: `_json_safe` left no NaN)."""
    return json.dumps(_json_safe(row), ensure_ascii=False, allow_nan=False, default=str) + "\n"


def _json_safe(value: Any) -> Any:
    """`value` with each non-finite float made None and bytes made text, through dicts,
    lists, tuples and numpy values (what a ground truth read from parquet or JSONL holds)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    if hasattr(value, "tolist"):  # a numpy value or array, a tensor: its Python values
        return _json_safe(value.tolist())
    return value
