"""A media column (`images`, `videos`) is told to hold nothing or media by one notion
(`holds_nothing`), however the file stores it: a parquet file written without column
statistics (pyarrow's `write_statistics=False`, writers that omit them) whose column holds
nothing was refused where the same file with statistics read as no media, and '' cells read
as no media in JSON but were refused in parquet. Without statistics the column's shape is
read row group by row group, from its smallest leaf: an image's bytes are never decoded."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mfsdp_ckpt.errors import MfsdpError
from tests.support.arrow_memory import arrow_peak
from trainer.data.media_columns import read_rows_refusing_media, refuse_media_columns

IMAGES = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
IMAGE = {"bytes": b"\x89PNG", "path": None}
# cells holding nothing, six rows in three row groups, and their arrow type
NOTHING = {
    "null-and-empty-lists": ([None, [], None, [], [], None], IMAGES),
    "null-structs": ([None] * 6, IMAGES.value_type),
    "empty-text": (["", None, "", "", None, ""], pa.string()),
    "blank-and-json-text": (["  ", "[]", None, "null", '""', "{}"], pa.string()),
    "nan": ([float("nan"), None] * 3, pa.float64()),
}
# cells whose last row holds a value
HELD = {
    "image": ([None, [], None, [], "", [IMAGE]], IMAGES),
    "list-of-a-null": ([None, [], None, [], [], [None]], IMAGES),
    "struct-of-nulls": ([None] * 5 + [{"bytes": None, "path": None}], IMAGES.value_type),
    "path-text": (["", None, "", "[]", None, "a.png"], pa.string()),
    "empty-bytes": ([None] * 5 + [b""], pa.binary()),
}
STATISTICS = pytest.mark.parametrize("statistics", [True, False], ids=["stats", "no-stats"])


def _parquet(path: Path, cells: list, kind: pa.DataType, statistics: bool, **write) -> Path:
    if kind == IMAGES:  # '' stands for an empty list in HELD's mixed row
        cells = [[] if cell == "" else cell for cell in cells]
    table = pa.table({"prompt": [f"q{at}" for at in range(len(cells))]})
    table = table.append_column("images", pa.array(cells, type=kind))
    pq.write_table(table, path, write_statistics=statistics, row_group_size=2, **write)
    return path


def _jsonl(path: Path, cells: list) -> Path:
    rows = [{"prompt": f"q{at}", "images": cell} for at, cell in enumerate(cells)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@STATISTICS
@pytest.mark.parametrize("nothing", list(NOTHING))
def test_a_media_column_holding_nothing_reads_as_no_media(tmp_path, nothing, statistics):
    cells, kind = NOTHING[nothing]
    path = _parquet(tmp_path / "text.parquet", cells, kind, statistics)
    refuse_media_columns(path)  # config check's look: nothing refused
    rows, _ = read_rows_refusing_media([str(path)], ["prompt"])  # the loaders' look
    assert [row["prompt"] for row in rows] == [f"q{at}" for at in range(6)]


@pytest.mark.parametrize("nothing", ["empty-text", "blank-and-json-text"])
def test_json_text_holding_nothing_reads_as_parquet_does(tmp_path, nothing):
    path = _jsonl(tmp_path / "text.jsonl", NOTHING[nothing][0])
    refuse_media_columns(path)
    rows, _ = read_rows_refusing_media([str(path)], ["prompt"])
    assert len(rows) == 6


@STATISTICS
@pytest.mark.parametrize("held", list(HELD))
def test_a_value_in_the_last_row_group_is_refused(tmp_path, held, statistics):
    cells, kind = HELD[held]
    path = _parquet(tmp_path / "mixed.parquet", cells, kind, statistics)
    with pytest.raises(MfsdpError) as caught:
        refuse_media_columns(path)
    assert str(caught.value).startswith(f"{path}: column 'images' (verl's data.image_key)")
    assert caught.value.exit_code == 2


def test_images_without_statistics_are_refused_without_decoding_their_bytes(tmp_path):
    image = {"bytes": bytes(range(256)) * (8 << 12), "path": None}  # 8 MiB, incompressible
    cells = [None, [], [image], None]
    path = _parquet(tmp_path / "geo.parquet", cells, IMAGES, False, compression="none")
    with arrow_peak() as pool, pytest.raises(MfsdpError, match="column 'images'"):
        refuse_media_columns(path)
    assert pool.max_memory() < 1 << 20, pool.max_memory()  # the path leaf alone was read
