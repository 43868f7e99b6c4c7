"""Data tables as the tests make and read them: through the readers and writer the commands
use (`trainer.data.files`), so a test sees what a run or `mfsdp data` would."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainer.data.files import read_rows_with_origins, write_tables


def read_rows(paths: list[str] | str) -> list[dict[str, Any]]:
    """All rows of the given files, in order, read as a run reads its data files."""
    return read_rows_with_origins(paths)[0]


def write_parquet(rows: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    """Write one table as `mfsdp data` writes its tables (`write_tables`)."""
    out = Path(path)
    write_tables({out: rows})
    return out
