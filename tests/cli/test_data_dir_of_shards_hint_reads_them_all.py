"""A directory of shards given as a data file is answered with the value that reads every
shard, in the list form `data.train_files` takes. Was: `e.g. data.train_files=DIR/part-0.parquet`,
one shard, and a run that followed it trained on a fraction of the data without a word.
Thousands of shards are counted and shown by their first few, to be listed each (no glob is
read); a directory `mfsdp data` wrote still names its one train table."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cli.launch import LISTED_WHOLE, check_data_files


def _refusal(capsys, tmp_path, key: str, given) -> str:
    files = {"train_files": [], "val_files": [], key: [str(given)]}
    if key == "val_files":
        files["train_files"] = [str(tmp_path / "t.jsonl")]
        (tmp_path / "t.jsonl").write_text("{}\n")
    with pytest.raises(SystemExit) as stopped:
        check_data_files(SimpleNamespace(**files), "sft")
    assert stopped.value.code == 2
    return capsys.readouterr().err


def _shards(directory, names):
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"")
    return [str(directory / name) for name in sorted(names)]


def test_a_dir_of_shards_is_answered_with_the_list_of_all_of_them(tmp_path, capsys):
    shards = _shards(tmp_path / "shards", [f"part-{i}.parquet" for i in range(3)])
    err = _refusal(capsys, tmp_path, "train_files", tmp_path / "shards")
    assert err.endswith(f"; to read all of them: data.train_files=[{','.join(shards)}])\n"), err


def test_the_hubs_train_shards_are_listed_and_its_test_shard_left_out(tmp_path, capsys):
    data = tmp_path / "gsm8k" / "data"
    train = _shards(data, [f"train-{i:05d}-of-00003.parquet" for i in range(3)])
    _shards(data, ["test-00000-of-00001.parquet"])
    err = _refusal(capsys, tmp_path, "train_files", tmp_path / "gsm8k")
    assert err.endswith(f"; to read all 3 train files: data.train_files=[{','.join(train)}])\n")


def test_validation_shards_are_listed_for_val_files(tmp_path, capsys):
    data = tmp_path / "data"
    _shards(data, [f"train-{i}.parquet" for i in range(4)])
    val = _shards(data, ["validation-0.parquet", "validation-1.parquet"])
    err = _refusal(capsys, tmp_path, "val_files", data)
    assert err.endswith(f"; to read all 2 val files: data.val_files=[{','.join(val)}])\n"), err


def test_thousands_of_shards_are_counted_and_shown_by_their_first_few(tmp_path, capsys):
    count = 2000
    shards = _shards(tmp_path / "many", [f"part-{i:05d}.parquet" for i in range(count)])
    err = _refusal(capsys, tmp_path, "train_files", tmp_path / "many")
    assert f"it holds {count} data files; to read all of them, list every one:" in err, err
    assert f"data.train_files=[{','.join(shards[:3])},...]" in err
    assert shards[3] not in err and len(err) < 1000


def test_a_list_is_given_whole_up_to_its_limit(tmp_path, capsys):
    shards = _shards(tmp_path / "s", [f"part-{i}.parquet" for i in range(LISTED_WHOLE)])
    err = _refusal(capsys, tmp_path, "train_files", tmp_path / "s")
    assert f"data.train_files=[{','.join(shards)}])" in err


def test_a_dir_mfsdp_data_wrote_still_names_its_one_train_table(tmp_path, capsys):
    tables = tmp_path / "out" / "sft"
    _shards(tables, ["train.parquet", "test.parquet"])
    err = _refusal(capsys, tmp_path, "train_files", tmp_path / "out")
    assert err.endswith(f": e.g. data.train_files={tables / 'train.parquet'})\n"), err
