"""A resume compares a path key by the file it names, not by its spelling (was:
`data.train_files` given relative once and absolute once, through a link, with `./` or a
trailing slash, was named as a changed setting). A recorded relative path was read from the
directory its run was started in, found from its recorded `trainer.run_dir`; paths that name
other files are still named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainer.config import SFTConfig, load_config, write_resolved_config
from trainer.config_history import keep_changed_config


def _config(*overrides: str) -> SFTConfig:
    return load_config(SFTConfig, None, list(overrides))


def _project(root: Path) -> Path:
    """A project dir with a data file and a tokenizer dir, and a link to its data dir."""
    (root / "data").mkdir(parents=True)
    (root / "data" / "train.jsonl").write_text("{}\n")
    (root / "tok").mkdir()
    (root / "data_link").symlink_to("data")
    return root


def _record(run_dir: str, *overrides: str) -> None:
    """The config.yaml a run started in this directory with `overrides` wrote."""
    write_resolved_config(run_dir, _config(f"trainer.run_dir={run_dir}", *overrides))


@pytest.mark.parametrize(
    ("recorded", "given"),
    [
        ("data/train.jsonl", "{root}/data/train.jsonl"),
        ("{root}/data/train.jsonl", "data/train.jsonl"),
        ("./data/train.jsonl", "data/train.jsonl"),
        ("data/train.jsonl", "data_link/train.jsonl"),
        ("data/train.jsonl", "{root}/data/../data/train.jsonl"),
    ],
)
def test_a_data_file_spelled_otherwise_is_no_changed_setting(
    tmp_path, monkeypatch, recorded, given
):
    root = _project(tmp_path)
    monkeypatch.chdir(root)
    _record("run", f"data.train_files=[{recorded.format(root=root)}]")
    now = _config("trainer.run_dir=run", f"data.train_files=[{given.format(root=root)}]")
    assert keep_changed_config(Path("run"), 2, now) is None
    assert not list(Path("run").glob("config.until_step_*.yaml"))


def test_a_tokenizer_dir_with_a_trailing_slash_or_absolute_is_no_changed_setting(
    tmp_path, monkeypatch
):
    root = _project(tmp_path)
    monkeypatch.chdir(root)
    _record("run", "data.train_files=[data/train.jsonl]", "model.tokenizer=tok/")
    now = _config(
        f"trainer.run_dir={root / 'run'}",  # given absolute now: how it started, not compared
        f"data.train_files=[{root / 'data' / 'train.jsonl'}]",
        f"model.tokenizer={root / 'tok'}",
    )
    assert keep_changed_config(root / "run", 2, now) is None


def test_a_data_file_that_names_another_file_is_still_named(tmp_path, monkeypatch):
    root = _project(tmp_path)
    (root / "other").mkdir()
    (root / "other" / "train.jsonl").write_text("{}\n")
    monkeypatch.chdir(root)
    _record("run", "data.train_files=[data/train.jsonl]")
    moved = root / "other" / "train.jsonl"
    note = keep_changed_config(Path("run"), 2, _config(f"data.train_files=[{moved}]"))
    assert note is not None
    assert f"data.train_files ['data/train.jsonl'] -> ['{moved}']" in note


def test_a_relative_file_read_from_another_directory_is_named_where_it_was(tmp_path, monkeypatch):
    """The same relative spelling, the run now started elsewhere: another file."""
    first, second = _project(tmp_path / "a"), _project(tmp_path / "b")
    monkeypatch.chdir(first)
    _record("run", "data.train_files=[data/train.jsonl]")
    monkeypatch.chdir(second)
    now = _config(f"trainer.run_dir={first / 'run'}", "data.train_files=[data/train.jsonl]")
    note = keep_changed_config(first / "run", 2, now)
    assert note is not None
    was = os.path.realpath(first / "data" / "train.jsonl")
    assert f"data.train_files ['{was}'] -> ['data/train.jsonl']" in note


def test_a_relative_file_of_a_run_started_from_an_unknown_directory_is_compared_by_spelling(
    tmp_path, monkeypatch
):
    """An absolute recorded run_dir says nothing of where the run started: a relative data
    file then is not taken for the absolute one (it may have been another), only for itself
    spelled otherwise."""
    root = _project(tmp_path)
    monkeypatch.chdir(root)
    _record(str(root / "run"), "data.train_files=[./data/train.jsonl]")
    same = _config(f"trainer.run_dir={root / 'run'}", "data.train_files=[data/train.jsonl/]")
    assert keep_changed_config(root / "run", 2, same) is None
    absolute = root / "data" / "train.jsonl"
    other = _config(f"trainer.run_dir={root / 'run'}", f"data.train_files=[{absolute}]")
    note = keep_changed_config(root / "run", 2, other)
    assert note is not None
    assert f"data.train_files ['./data/train.jsonl'] -> ['{absolute}']" in note
