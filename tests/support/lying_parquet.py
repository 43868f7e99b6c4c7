"""Parquet files whose footer's statistics lie: a column said null in every row while its
cells hold values, as a writer that mends its rows and not its footer leaves them."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow.parquet as pq


def footer_saying_all_null(path: Path, nulls: int) -> Path:
    """`path`'s parquet file, of one row group of under 64 rows (each count a byte of the
    footer), its last column's null count (`nulls`; every other column's 0) patched to the
    group's row count: the cells keep their values."""
    rows = pq.ParquetFile(path).metadata.num_rows
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack("<i", data[-8:-4])
    for at in range(len(data) - 8 - length, len(data) - 8):
        if data[at] != 2 * nulls:  # a zigzag varint of one byte
            continue
        patched = bytearray(data)
        patched[at] = 2 * rows
        path.write_bytes(patched)
        try:
            group = pq.ParquetFile(path).metadata.row_group(0)
        except Exception:  # a byte not the null count: the footer is broken
            continue
        told = [group.column(leaf).statistics for leaf in range(group.num_columns)]
        if [stats.null_count for stats in told] == [0] * (len(told) - 1) + [rows]:
            return path
    path.write_bytes(data)
    raise AssertionError("no null count to patch")
