"""An SFT `tools` (or `enable_thinking`) cell that holds nothing trains whether stored as a
list or as JSON text: verl writes tool lists as JSON text (Arrow cannot unify their structs
across rows), and the text '[]' was refused ("extra chat template arguments are not
supported") where the list [] was accepted, one meaning told apart by how it was stored.
A cell with a value is still refused, however stored: a dict with keys is one whatever its
values hold (`{% if tools %}` reads it as a value), where it had passed as "nothing"."""

from __future__ import annotations

from typing import Any

import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.data_tables import write_parquet
from trainer.data.chat import ChatFormatError, messages_of
from trainer.data.chat_columns import ChatColumns
from trainer.data.empty_cells import holds_nothing

CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
NOTHING = [
    None,
    float("nan"),
    [],
    {},
    "",
    " ",
    "[]",
    "{}",
    '""',
    "null",
    " [ ] ",
    "[" + " " * 40 + "]",  # JSON text over 16 characters was never parsed
]
VALUES = [
    '[{"type": "function", "function": {"name": "f"}}]',
    ["f"],
    {"a": 1},
    "f",
    "nullable",
    '"[]"',  # JSON text of the text '[]': a value
    False,
    0,
    {"a": None},  # a dict with keys: a value to a template's `{% if tools %}`
    {"name": "", "parameters": {}},
    {"a": []},
    '{"a": null}',
]


@pytest.mark.parametrize("value", NOTHING, ids=repr)
def test_a_cell_holding_nothing_is_no_template_argument(value):
    assert holds_nothing(value)
    for column in ("tools", "enable_thinking"):
        assert messages_of({"messages": CHAT, column: value}, ChatColumns()) == CHAT


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_cell_with_a_value_is_refused(value):
    assert not holds_nothing(value)
    with pytest.raises(ChatFormatError, match=r"^column 'tools' .*: extra chat template"):
        messages_of({"messages": CHAT, "tools": value}, ChatColumns())


@pytest.mark.parametrize("tools", ["[]", []], ids=["text", "list"])
def test_config_check_says_ok_to_no_tools_stored_either_way(tmp_path, tools: Any):
    rows = [{"messages": CHAT, "tools": tools}] * 4
    path = write_parquet(rows, tmp_path / "t.parquet")
    check_config("sft", None, [f"data.train_files={path}", f"trainer.run_dir={tmp_path / 'r'}"])
    text = write_parquet([{"messages": CHAT, "tools": '["f"]'}] * 4, tmp_path / "f.parquet")
    with pytest.raises(MfsdpError, match=r"f.parquet row 1: column 'tools' \('\[\"f\"\]'\)"):
        check_config("sft", None, [f"data.train_files={text}", f"trainer.run_dir={tmp_path}"])
