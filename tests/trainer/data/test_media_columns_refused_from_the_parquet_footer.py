"""A parquet media column is told to hold media or nothing from the file's footer, no media
byte decoded. Reading the column up to its first row holding a value decoded its whole first
row group (to measure it) first: a 300 MB geo3k-style file took 1.8 GB and 9 s to be told to
drop its `images`, and a 70 MiB inline video was refused as a row too long to be a table's,
not naming the column. What holds nothing (null cells, empty lists) still reads as no media,
in every row group (a file written without statistics too:
test_media_columns_without_statistics_or_as_empty_text.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mfsdp_ckpt.errors import MfsdpError
from tests.support.arrow_memory import arrow_peak
from trainer.data.files import MAX_ROW_BYTES
from trainer.data.media_columns import refuse_media_columns

IMAGES = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
MEDIA = {"images": "data.image_key", "videos": "data.video_key"}


def _parquet(path: Path, column: str, cells: list, kind: pa.DataType = IMAGES, **write) -> Path:
    prompts = [f"q{at}" for at in range(len(cells))]
    pq.write_table(pa.table({"prompt": prompts, column: pa.array(cells, type=kind)}), path, **write)
    return path


def _refusal(path: Path, column: str) -> str:
    return f"{path}: column '{column}' (verl's {MEDIA[column]}): multimodal rows are not supported"


def _refused(path: Path) -> MfsdpError:
    with pytest.raises(MfsdpError) as caught:
        refuse_media_columns(path)
    assert caught.value.exit_code == 2
    return caught.value


@pytest.mark.parametrize("column", ["images", "videos"])
def test_a_big_media_cell_is_refused_naming_the_column_without_decoding_it(tmp_path, column):
    cell = 8 << 20  # incompressible: its page is 8 MiB decompressed and all
    media = [[{"bytes": bytes(range(256)) * (cell // 256), "path": None}], None, None]
    path = _parquet(tmp_path / "geo.parquet", column, media, compression="none")
    with arrow_peak() as pool:
        refused = _refused(path)
    assert str(refused).startswith(_refusal(path, column))
    assert pool.max_memory() < 1 << 20, pool.max_memory()  # the footer alone was read


def test_an_inline_video_longer_than_a_row_is_refused_as_media(tmp_path):
    video = [[{"bytes": b"\0" * (MAX_ROW_BYTES + 1), "path": None}], None]
    path = _parquet(tmp_path / "video.parquet", "videos", video, compression="zstd")
    refused = _refused(path)
    assert str(refused).startswith(_refusal(path, "videos"))
    assert str(refused).endswith("drop the column to train on the text")


@pytest.mark.parametrize(
    ("cells", "kind"),
    [
        ([None, [], None, [], None, None], IMAGES),
        ([None] * 6, IMAGES.value_type),
        ([[]] * 6, pa.list_(pa.string())),
    ],
    ids=["null-and-empty-lists", "null-structs", "empty-string-lists"],
)
def test_nothing_in_any_row_group_reads_as_no_media(tmp_path, cells, kind):
    path = _parquet(tmp_path / "text.parquet", "images", cells, kind, row_group_size=2)
    refuse_media_columns(path)


@pytest.mark.parametrize(
    ("cells", "kind"),
    [
        ([None, [], None, [], None, [None]], IMAGES),
        ([None, None, None, None, {"bytes": None, "path": None}, None], IMAGES.value_type),
        ([None, [], None, [], None, [{"bytes": None, "path": "a.png"}]], IMAGES),
        ([None, None, None, None, None, "a.png"], pa.string()),
    ],
    ids=["list-of-a-null", "struct-of-nulls", "path-only", "path-string"],
)
def test_a_row_of_no_leaf_value_still_holds_one(tmp_path, cells, kind):
    """A list of a null and a struct of null fields hold a value as a JSON cell does,
    in the last row group; so does a string naming an image."""
    path = _parquet(tmp_path / "mixed.parquet", "images", cells, kind, row_group_size=2)
    assert str(_refused(path)).startswith(_refusal(path, "images"))
