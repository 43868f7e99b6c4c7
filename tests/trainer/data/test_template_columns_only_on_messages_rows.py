"""A `tools` or `enable_thinking` column is refused only on rows whose messages are read:
verl's SFTDataset (prompt/response rows) never gives it to a chat template, nor does a
prompt/response row here, yet `data.prompt_key=question data.response_key=answer` over rows
with a `tools` column was refused ("extra chat template arguments are not supported")."""

from __future__ import annotations

import pytest

from trainer.data.chat import ChatFormatError, messages_of
from trainer.data.chat_columns import ChatColumns

TOOLS = [{"type": "function", "function": {"name": "calc"}}]
ROW = {"question": "2+2?", "answer": "4", "tools": TOOLS, "enable_thinking": True}
CHAT = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]


@pytest.mark.parametrize("source", ["auto", "prompt_response"])
def test_prompt_response_rows_leave_the_columns_alone(source):
    columns = ChatColumns(prompt="question", response="answer", source=source)
    assert messages_of(dict(ROW), columns) == CHAT


@pytest.mark.parametrize("source", ["auto", "messages"])
def test_messages_rows_still_refuse_them(source):
    row = {"messages": CHAT, "tools": TOOLS}
    with pytest.raises(ChatFormatError, match=r"^column 'tools' .*: extra chat template"):
        messages_of(row, ChatColumns(source=source))
