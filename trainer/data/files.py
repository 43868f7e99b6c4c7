"""Read table rows from parquet or jsonl files, and write them back (one reader for every
command)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError


class DataFileError(MfsdpUsageError, ValueError):
    """A data file is missing, unreadable or not the format its name says; the message names it."""


def read_rows(paths: list[str] | str) -> list[dict[str, Any]]:
    """All rows of the given files, in order; `.parquet` or `.jsonl`/`.json` (one object per
    line)."""
    rows: list[dict[str, Any]] = []
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        rows += _read_one(Path(path))
    return rows


def _read_one(path: Path) -> list[dict[str, Any]]:
    if not os.path.lexists(path):
        raise DataFileError(f"{path}: no such file")
    try:  # a FIFO or a device would block the read or never end: say what is there
        safe_files.regular_file(path)
    except CheckpointFileError as err:
        raise DataFileError(str(err)) from None
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as err:  # pyarrow raises several types for a broken file
            raise DataFileError(f"{path}: not a readable parquet file ({err})") from err
    if suffix in (".jsonl", ".json"):
        return _read_jsonl(path)
    raise DataFileError(f"{path}: unknown data format {suffix!r} (use .parquet or .jsonl)")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """One JSON object per line; lines are decoded one by one so bad bytes name their line."""
    rows = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataFileError(
                    f"{path}:{number}: not UTF-8 text (byte {err.start} of the line)"
                ) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataFileError(f"{path}:{number}: not valid JSON ({err.msg})") from err
            if not isinstance(row, dict):
                raise DataFileError(f"{path}:{number}: expected a JSON object per line")
            rows.append(row)
    return rows


def write_parquet(rows: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out
