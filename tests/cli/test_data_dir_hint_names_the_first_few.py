"""A directory given as a data file is answered with the data files it holds: the first few
and how many more (`printable.first_of`, as every long list in an error line is said)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cli.launch import check_data_files

SPLITS = ("a", "b", "c", "d", "e", "f", "train")


def test_a_data_dir_of_many_files_names_four_and_counts_the_rest(tmp_path, capsys):
    tables = tmp_path / "out" / "sft"
    tables.mkdir(parents=True)
    for split in SPLITS:
        (tables / f"{split}.parquet").write_bytes(b"")
    data = SimpleNamespace(train_files=[str(tables)], val_files=[])
    with pytest.raises(SystemExit) as stopped:
        check_data_files(data, "sft")
    assert stopped.value.code == 2
    named = ", ".join(str(tables / f"{split}.parquet") for split in SPLITS[:4])
    assert capsys.readouterr().err == (
        f"error: data.train_files: {tables}: is a directory, not a data file (it holds {named}"
        f" (+{len(SPLITS) - 4} more): e.g. data.train_files={tables / 'train.parquet'})\n"
    )
