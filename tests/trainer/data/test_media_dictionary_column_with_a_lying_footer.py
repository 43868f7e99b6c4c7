"""A dictionary-encoded parquet media column whose footer's statistics lie (every cell null)
and whose first cells are null is refused by `mfsdp config check` with train's line: its
data pages hold a byte or so of index a cell, too few for the chunk's size to prove a value,
and the first cells read were null, so the check said ok while train refused the file at
the row. `refuse_media_columns` reads the chunk's definition levels, exact whatever the
footer says, and no dictionary: an honest all-null one is still cheap
(test_media_column_all_null_read_cheaply)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.lying_parquet import footer_saying_all_null
from trainer.config import DataConfig
from trainer.data.files import DataFileError
from trainer.data.media_columns import refuse_media_columns
from trainer.data.parquet_levels import chunk_sets_a_cell
from trainer.data.sft_dataset import load_sft_splits

ROWS = 40
IMAGE = bytes(range(256)) * 32
MESSAGES = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


def _lying(path, images: pa.Array, nulls: int, **write) -> str:
    """An SFT table of `images` (dictionary-encoded as written), its footer saying every
    image null."""
    table = pa.table({"messages": [MESSAGES] * len(images), "images": images})
    pq.write_table(table, path, **write)
    return str(footer_saying_all_null(path, nulls))


def _images(nulls: int, value: bytes | str = IMAGE) -> pa.Array:
    """`nulls` nulls, then `value` to ROWS cells."""
    return pa.array([None] * nulls + [value] * (ROWS - nulls))


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("compression", ["snappy", "none", "zstd"])
def test_a_lying_dictionary_column_is_refused_by_check_as_by_train(tmp_path, version, compression):
    nulls = ROWS - 1  # the last row alone holds an image
    path = _lying(
        tmp_path / "t.parquet",
        _images(nulls),
        nulls,
        compression=compression,
        data_page_version=version,
    )
    assert pq.ParquetFile(path).metadata.row_group(0).column(1).has_dictionary_page
    with pytest.raises(MfsdpError) as loaded:
        load_sft_splits(DataConfig(train_files=[path]), None, 0, False)
    with pytest.raises(MfsdpError) as checked:
        check_config("sft", None, [f"data.train_files=[{path}]", f"trainer.run_dir={tmp_path}"])
    assert str(checked.value) == str(loaded.value)
    assert str(checked.value).startswith(f"{path}: column 'images' (verl's data.image_key)")


@pytest.mark.parametrize("value", [IMAGE, "img_000001.png"], ids=["bytes", "names"])
def test_a_lying_categorical_column_is_refused(tmp_path, value):
    """Of pandas' categorical, its indexes' dictionary written as is: names of images are
    text, whose cells set are read to tell a name from ''."""
    indices = pa.array([None] * (ROWS - 1) + [0], pa.int32())
    images = pa.DictionaryArray.from_arrays(indices, _images(ROWS - 1, value).drop_null())
    path = _lying(tmp_path / "t.parquet", images, ROWS - 1)
    with pytest.raises(DataFileError, match="column 'images'"):
        refuse_media_columns(path)


def test_a_lying_column_of_empty_names_holds_nothing(tmp_path):
    """Cells set to '' hold nothing, as train reads them: the levels do not refuse them."""
    names = pa.array([None] * (ROWS - 1) + [""], pa.string())
    refuse_media_columns(_lying(tmp_path / "t.parquet", names, ROWS - 1))


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("dictionary", [True, False], ids=["dictionary", "plain"])
def test_levels_tell_a_set_cell_wherever_it_is(tmp_path, version, dictionary):
    """Of pages of a few cells, runs and bit-packed levels: the one cell set is found in
    any page of any group, and a chunk of nulls has none."""
    path = tmp_path / "t.parquet"
    for row in [None, 0, 7, 8, 100, 1999]:
        cells = [None] * 2000
        if row is not None:
            cells[row] = b"x"
        table = pa.table({"images": pa.array(cells, pa.binary())})
        pq.write_table(
            table,
            path,
            row_group_size=500,
            data_page_size=64,
            write_batch_size=16,
            use_dictionary=dictionary,
            data_page_version=version,
        )
        metadata = pq.ParquetFile(path).metadata
        with open(path, "rb") as handle:
            told = [
                chunk_sets_a_cell(handle.fileno(), metadata.row_group(at).column(0), 1, 1 << 10)
                for at in range(metadata.num_row_groups)
            ]
        assert told == [row is not None and row // 500 == at for at in range(4)]
