"""A data file that is a symlink leading nowhere is said to be one: a loop, or a link to a
missing target, named where it points, in the words `mfsdp data` uses for the same file
(`safe_files`). Was: "no such file ... make it with `mfsdp data`", of a name `ls` lists."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from cli.launch import check_data_files
from cli.main import main


def _refusal(capsys, path: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        check_data_files(SimpleNamespace(train_files=[path], val_files=[]), "sft")
    assert stopped.value.code == 2
    return capsys.readouterr().err


def test_a_symlink_loop_is_named_as_one(tmp_path, capsys):
    os.symlink(tmp_path / "loop1", tmp_path / "loop2.jsonl")
    os.symlink(tmp_path / "loop2.jsonl", tmp_path / "loop1")
    given = str(tmp_path / "loop2.jsonl")
    assert _refusal(capsys, given) == (
        f"error: data.train_files: {given}: cannot resolve (symlink loop);"
        f" it is a symlink to {tmp_path / 'loop1'}\n"
    )


def test_a_link_to_a_missing_target_names_the_target(tmp_path, capsys):
    target = tmp_path / "unmounted" / "train.jsonl"
    os.symlink(target, tmp_path / "train.jsonl")
    given = str(tmp_path / "train.jsonl")
    err = _refusal(capsys, given)
    assert (
        err == f"error: data.train_files: {given}: file is missing; it is a symlink to {target}\n"
    )
    assert "mfsdp data" not in err


def test_a_loop_on_the_way_is_named_too(tmp_path, capsys):
    os.symlink(tmp_path / "d1", tmp_path / "d2")
    os.symlink(tmp_path / "d2", tmp_path / "d1")
    given = str(tmp_path / "d1" / "train.jsonl")
    assert _refusal(capsys, given) == (
        f"error: data.train_files: {given}: cannot resolve (symlink loop)\n"
    )


def test_a_name_with_nothing_there_still_says_how_to_make_one(tmp_path, capsys):
    err = _refusal(capsys, str(tmp_path / "train.jsonl"))
    assert ": no such file or directory;" in err and "mfsdp data gsm8k|math" in err


def test_train_says_what_mfsdp_data_says_of_the_same_loop(tmp_path, monkeypatch, capsys):
    """One helper, so the two commands say the same thing of one file."""
    os.symlink(tmp_path / "b.jsonl", tmp_path / "a.jsonl")
    os.symlink(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    given = str(tmp_path / "a.jsonl")
    out = str(tmp_path / "out")
    monkeypatch.setattr(sys, "argv", ["mfsdp", "data", "gsm8k", "--input", given, "--out", out])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 2
    said = capsys.readouterr().err.removeprefix("error: ").strip()
    assert said == f"{given}: cannot resolve (symlink loop)"
    assert f"error: data.train_files: {said};" in _refusal(capsys, given)
