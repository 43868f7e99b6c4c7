"""Whether a flat parquet column chunk holds a non-null cell, read from its data pages'
definition levels alone: exact where the footer's statistics may lie, and cheap where they
do not, as a chunk of nulls has pages of levels only.

A chunk's footer says how many of its cells are null; a footer that lies (every cell null)
is told by the chunk's size where its values are large, and not where they are small: a
dictionary-encoded column's data pages hold indexes of a byte or two a cell, its values
being in its dictionary page, whose entries prove nothing (pandas' categorical keeps every
category after the rows using them are filtered out). Decoding the chunk through pyarrow
decodes that dictionary, group by group; here the reading starts at the chunk's first data
page, past its dictionary, and each data page's levels are read up to the first cell set.
A page this reader does not know (a codec, an encoding, a header it cannot parse) leaves
the answer to the caller (None), who reads the cells; so does a header a reader of i32
fields reads otherwise (parquet-cpp's thrift keeps a longer integer's low 32 bits), a page
claiming more cells or bytes than its chunk holds, levels longer than `_LEVELS_READ` or a
chunk of more than `_PAGES` pages: what this reader holds and walks is bounded whatever the
headers claim, and the pages past that are pyarrow's to read, as train reads them."""

from __future__ import annotations

import os
from typing import Any

# parquet's page types (PageHeader.type) and the RLE encoding of levels
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_RLE = 3

# the codecs of a chunk's footer arrow can undo alone (parquet's LZ4 is framed its own way)
_CODECS = {"SNAPPY": "snappy", "GZIP": "gzip", "ZSTD": "zstd", "BROTLI": "brotli"}
_CODECS["LZ4_RAW"] = "lz4_raw"

# the codecs of blocks, whose page is undone whole; arrow undoes the others as a stream
_WHOLE = ("snappy", "lz4_raw")

# the bytes of a page header read at once: thrift headers of data pages are tens of bytes,
# more with statistics, which hold a value twice at most (longer ones are a page to read)
_HEADER_BYTES = 1 << 10

# the most bytes of a page's definition levels read (bit-packed, a bit a cell: 2**23 cells),
# and of a page decoded whole (a codec of blocks, snappy's or LZ4's, undoes a page at once):
# a page's levels past them are pyarrow's to read
_LEVELS_READ = 1 << 20
_DECODED_BYTES = 1 << 22

# the most pages of a chunk walked: this reader walks them in Python, and pyarrow reads a
# chunk of many small pages more cheaply
_PAGES = 1 << 10

# the largest value of a thrift i32 field: parquet's counts and sizes
_I32 = (1 << 31) - 1


def chunk_sets_a_cell(fd: int, chunk: Any, max_level: int, page_limit: int) -> bool | None:
    """Whether a cell of the flat, top-level column chunk whose footer metadata is `chunk`,
    in the parquet file open as `fd`, is set (not null), from its pages' definition levels
    (`max_level`, the column's greatest: 0 sets every cell); None where its pages cannot be
    read so. A data page larger than `page_limit` bytes a cell, stored or uncompressed, is
    one nulls could not fill: a cell is set, the page unread. Reads nothing past the chunk
    or the file, no page after the first setting a cell, and no more than a page's levels
    (`_page_levels`)."""
    if max_level == 0:
        return chunk.num_values > 0
    if max_level != 1:
        return None
    codec = _codec(chunk.compression)
    at = chunk.data_page_offset  # past a dictionary page, read by no one here
    start = min(at, chunk.dictionary_page_offset or at)
    end = min(start + chunk.total_compressed_size, os.fstat(fd).st_size)
    seen = 0
    for _ in range(_PAGES):
        if seen >= chunk.num_values:
            return False
        if at >= end:
            return None
        header = _read_header(fd, at, end)
        if header is None:
            return None
        kind, size, stored, page, length = header
        at += length
        if at + stored > end:
            return None
        if kind == _DICTIONARY_PAGE:
            at += stored
            continue
        if kind not in (_DATA_PAGE, _DATA_PAGE_V2) or page is None:
            return None
        values = page.get(1)
        if not isinstance(values, int) or not 0 <= values <= chunk.num_values - seen:
            return None
        if size > chunk.total_uncompressed_size:
            return None
        if max(size, stored) > page_limit * (values + 1):
            return True
        levels = _page_levels(fd, at, stored, kind, page, codec, size)
        if levels is None:
            return None
        set_ = _levels_set(levels, values)
        if set_ is not False:
            return set_
        seen += values
        at += stored
    return None if seen < chunk.num_values else False


def _codec(name: str) -> Any:
    """The arrow codec of a footer's compression `name`; None for none, False where arrow
    cannot undo it here."""
    import pyarrow as pa

    if name == "UNCOMPRESSED":
        return None
    return pa.Codec(_CODECS[name]) if name in _CODECS else False


def _page_levels(
    fd: int, at: int, stored: int, kind: int, page: dict[int, Any], codec: Any, size: int
) -> bytes | None:
    """The RLE-encoded definition levels of a data page of type `kind` stored as `stored`
    bytes at `at` of the file open as `fd`, its header's fields `page`, compressed by `codec`
    to `size` bytes; None where this reader does not know them or they are longer than
    `_LEVELS_READ`. Reads and decodes the page's first bytes alone where its codec allows."""
    if kind == _DATA_PAGE_V2:
        levels, repeats = page.get(5), page.get(6, 0)
        if not isinstance(levels, int) or repeats != 0 or not 0 <= levels <= stored:
            return None
        # levels of a v2 page are stored uncompressed, at its start
        return os.pread(fd, levels, at) if levels <= _LEVELS_READ else None
    if page.get(3) != _RLE or codec is False:
        return None
    data = _page_start(fd, at, stored, codec, size)
    if data is None or len(data) < 4:
        return None
    length = int.from_bytes(data[:4], "little")
    return data[4 : 4 + length] if length <= len(data) - 4 else None


def _page_start(fd: int, at: int, stored: int, codec: Any, size: int) -> bytes | None:
    """The first bytes, up to a length prefix and `_LEVELS_READ` of levels (fewer where it
    ends), of the page stored as `stored` bytes at `at` of the file open as `fd`, compressed
    by `codec` to `size` bytes; None where it is over `_DECODED_BYTES` stored, or decoded
    by a codec undoing a page whole, or its bytes do not decode."""
    import pyarrow as pa

    want = min(size, 4 + _LEVELS_READ)
    if codec is None:
        return os.pread(fd, min(stored, want), at)
    if max(stored, size if codec.name in _WHOLE else 0) > _DECODED_BYTES:
        return None
    data = pa.py_buffer(os.pread(fd, stored, at))
    try:
        if codec.name in _WHOLE:
            return codec.decompress(data, size).to_pybytes()[:want]
        with pa.input_stream(data, compression=codec.name) as stream:
            return stream.read(want)
    except (OSError, ValueError):  # arrow's errors of a corrupt page
        return None


def _levels_set(levels: bytes, values: int) -> bool | None:
    """Whether one of the first `values` definition levels, RLE/bit-packed hybrid encoded
    in `levels` one bit each, is set; None where they end early."""
    at = 0
    left = values
    while left > 0:
        header, at = _varint(levels, at)
        if header is None:
            return None
        if header & 1:  # groups of 8 levels, a byte each
            groups = header >> 1
            packed = levels[at : at + groups]
            if len(packed) < groups:
                return None
            count = min(8 * groups, left)
            if int.from_bytes(packed, "little") & ((1 << count) - 1):
                return True
            at += groups
            left -= count
        else:  # a run of one level
            if at >= len(levels):
                return None
            if levels[at] and header >> 1:
                return True
            at += 1
            left -= header >> 1
    return False


def _read_header(fd: int, at: int, end: int) -> tuple[int, int, int, Any, int] | None:
    """The page header at byte `at` of the file open as `fd` (before `end`): its type,
    uncompressed and stored sizes, the fields of its data page header (v1 or v2; None
    for other pages), and its own length; None where it does not parse."""
    data = os.pread(fd, min(_HEADER_BYTES, end - at), at)
    try:
        fields, length = _struct(data, 0)
    except (IndexError, ValueError):
        return None
    kind, size, stored = (fields.get(field) for field in (1, 2, 3))
    if not (isinstance(kind, int) and isinstance(size, int) and isinstance(stored, int)):
        return None
    if min(kind, size, stored) < 0:
        return None
    page = fields.get(8) if kind == _DATA_PAGE_V2 else fields.get(5)
    return kind, size, stored, page if isinstance(page, dict) else None, length


def _varint(data: bytes, at: int) -> tuple[int | None, int]:
    """The unsigned varint at `at` of `data` and the offset past it (None where it ends)."""
    value = shift = 0
    while at < len(data) and shift < 64:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
    return None, at


def _struct(data: bytes, at: int) -> tuple[dict[int, Any], int]:
    """The thrift compact struct at `at` of `data`: its integer and struct fields by id (other
    fields skipped), and the offset past it. Raises IndexError or ValueError where it does
    not parse."""
    fields: dict[int, Any] = {}
    field = 0
    while True:
        byte = data[at]
        at += 1
        if byte == 0:
            return fields, at
        kind = byte & 0x0F
        if byte >> 4:
            field += byte >> 4
        else:
            raw, at = _varint(data, at)
            field = _zigzag(raw)
        value, at = _value(data, at, kind)
        fields[field] = value


def _value(data: bytes, at: int, kind: int) -> tuple[Any, int]:
    """The thrift compact value of type `kind` at `at` of `data`: an integer, a struct's
    fields, or None for those skipped; and the offset past it."""
    if kind in (1, 2):  # booleans, in the field's type
        return kind == 1, at
    if kind == 3:
        return data[at], at + 1
    if kind in (4, 5):  # i16, i32: out of range, a reader of i32 reads another value
        raw, at = _varint(data, at)
        value = _zigzag(raw)
        if not -_I32 - 1 <= value <= _I32:
            raise ValueError("i32 out of range")
        return value, at
    if kind == 6:  # i64, no field read here: skipped, as a reader of i32 fields does
        raw, at = _varint(data, at)
        _zigzag(raw)  # raises where the varint is cut off
        return None, at
    if kind == 7:
        return None, at + 8
    if kind == 8:
        length, at = _varint(data, at)
        if length is None or at + length > len(data):
            raise ValueError("binary past the header read")
        return None, at + length
    if kind in (9, 10):
        head = data[at]
        at += 1
        count: int | None = head >> 4
        if count == 15:
            count, at = _varint(data, at)
        for _ in range(_count(count)):
            at = _skip_element(data, at, head & 0x0F)
        return None, at
    if kind == 11:
        pairs, at = _varint(data, at)
        if _count(pairs):
            types = data[at]
            at += 1
            for _ in range(_count(pairs)):
                at = _skip_element(data, at, types >> 4)
                at = _skip_element(data, at, types & 0x0F)
        return None, at
    if kind == 12:
        return _struct(data, at)
    raise ValueError(f"thrift type {kind}")


def _skip_element(data: bytes, at: int, kind: int) -> int:
    """The offset past a list, set or map element of type `kind` at `at` of `data`."""
    if kind in (1, 2):  # a boolean element is a byte
        return at + 1
    return _value(data, at, kind)[1]


def _count(count: int | None) -> int:
    """A container's element count, refused (ValueError) where it cannot fit a header."""
    if count is None or count > _HEADER_BYTES:
        raise ValueError("container past the header read")
    return count


def _zigzag(raw: int | None) -> int:
    """The signed integer of the zigzag-encoded `raw` (ValueError where it was cut off)."""
    if raw is None:
        raise ValueError("varint cut off")
    return (raw >> 1) ^ -(raw & 1)
