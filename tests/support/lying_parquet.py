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


def data_page(levels: bytes, values: int, size: int | None = None, body: bytes = b"") -> bytes:
    """A v1 data page, uncompressed, of `values` cells (as its header says) whose RLE
    definition levels are `levels` and whose values are `body`; its header's uncompressed
    size `size` where given (a compressed `body` then, levels in it)."""
    stored = struct.pack("<i", len(levels)) + levels + body if size is None else body
    fields = (
        _thrift_i32(1, values) + _thrift_i32(1, 0) + _thrift_i32(1, _RLE) + _thrift_i32(1, _RLE)
    )
    header = (
        _thrift_i32(1, 0)
        + _thrift_i32(1, len(stored) if size is None else size)
        + _thrift_i32(1, len(stored))
        + bytes([2 << 4 | 12])  # field 5, a struct: the data page header
        + fields
        + b"\x00\x00"
    )
    return header + stored


def run_of_levels(count: int, level: int) -> bytes:
    """An RLE run of `count` definition levels `level`, a bit each."""
    return _varint(count << 1) + bytes([level])


def chunk_replaced(path: Path, leaf: int, pages: bytes) -> Path:
    """`path`'s parquet file, the data pages of column `leaf` of its first row group replaced
    by `pages` (zeros after them to the chunk's stored size, which its footer keeps)."""
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(leaf)
    start, stored = chunk.data_page_offset, chunk.total_compressed_size
    if len(pages) > stored:
        raise AssertionError(f"{len(pages)} bytes of pages in a chunk of {stored}")
    data = bytearray(path.read_bytes())
    data[start : start + stored] = pages + bytes(stored - len(pages))
    path.write_bytes(data)
    return path


_RLE = 3  # parquet's RLE encoding of levels


def _thrift_i32(delta: int, value: int) -> bytes:
    """A thrift compact field of type i32, `delta` past the last field's id, holding `value`
    (of any size: the bytes a writer of longer integers leaves)."""
    return bytes([delta << 4 | 5]) + _varint(value << 1 if value >= 0 else (-value << 1) - 1)


def _varint(value: int) -> bytes:
    """The unsigned LEB128 varint of `value`."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))
