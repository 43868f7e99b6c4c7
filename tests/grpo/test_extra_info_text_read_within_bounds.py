"""An `extra_info` written as JSON text is refused as text (verl stops on it) by train's
loader and `mfsdp config check` alike, one line, exit 2, and is read for verl's tool keys
only within the bounds any JSON cell is parsed in (`empty_cells`).

Were: the tool check parsed such text unbounded for every row: text nested 5,000 deep
raised json's RecursionError (a traceback, exit 1) and a 46 MB cell took 1.5 GB. And config
check, reading only the task columns of a file whose first row group is over a batch of
train's reader, said ok to a text `extra_info` that train refused at row 1."""

from __future__ import annotations

import json

import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.grpo.test_rows_of_other_rollouts_refused_in_any_form import TOOL_INFO, _refusals
from tests.support.data_tables import write_parquet
from tests.support.grpo import SMALL_LENGTHS, changed_rl_rows
from trainer.data.empty_cells import JSON_TEXT_MAX
from trainer.grpo.unsupported_rows import unsupported_task

TEXT_LINE = "extra_info is str {}"


def test_text_nested_past_the_bound_is_refused_as_text_in_one_line(tmp_path):
    deep = '{"a":' + "[" * 5_000 + "]" * 5_000 + "}"
    path = write_parquet(changed_rl_rows(tmp_path, extra_info=deep), tmp_path / "deep.parquet")
    for said in _refusals(path, tmp_path):
        assert said.startswith(f"{path} row 1: {TEXT_LINE.format(repr(deep)[:12])}"), said


def test_text_longer_than_the_bound_is_not_parsed_for_tool_keys():
    """Past JSON_TEXT_MAX the text is not parsed (its size, not its keys, sets the cost): it
    is refused as the text it is, as a shorter one without tools is."""
    padded = json.dumps({**TOOL_INFO, "pad": "x" * JSON_TEXT_MAX})
    assert unsupported_task({"extra_info": json.dumps(TOOL_INFO)}) is not None
    assert unsupported_task({"extra_info": padded}) is None


def test_text_in_a_parquet_of_one_large_row_group_is_refused_by_config_check(tmp_path):
    """Only the prompt and task columns of such a file's first row are read here: the
    extra_info among them is refused with train's line."""
    text = json.dumps({"split": "train", "index": 0})
    path = write_parquet(
        changed_rl_rows(tmp_path, extra_info=text)[:1] * 20_000, tmp_path / "big.parquet"
    )
    overrides = [f"data.train_files={path}", *SMALL_LENGTHS, f"trainer.run_dir={tmp_path / 'run'}"]
    with pytest.raises(MfsdpError) as caught:
        check_config("grpo", None, overrides)
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith(
        f"{path} row 1: {TEXT_LINE.format(repr(text))}: verl reads every row's extra_info as a dict"
    )
