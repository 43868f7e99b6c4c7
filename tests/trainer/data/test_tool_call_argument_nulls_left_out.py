"""A parquet file of tool-calling chats gives every call's `arguments` struct each argument
key any call in the column has, null where the call has none (pyarrow's schema inference,
as datasets and pandas write it): a `weather(city)` call trained as
`{"city": "Oslo", "a": null, "b": null}`, teaching the model to name every other tool's
arguments. A turn's own null keys were already left out; a tool call's are now too, at
every depth, by the same rule."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.real_chat_templates import qwen_tokenizer
from trainer.config import DataConfig
from trainer.data.sft_dataset import load_sft_splits


def chat(name: str, arguments: dict, result: str) -> dict:
    call = {"id": None, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": result},
            {"role": "assistant", "content": "done"},
        ]
    }


def test_a_calls_null_arguments_are_not_trained(tmp_path):
    rows = [
        chat("weather", {"city": "Oslo", "where": {"zip": "0150"}}, "rain"),
        chat("add", {"a": 1, "b": 2}, "3"),
    ]
    path = tmp_path / "tools.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    tokenizer = qwen_tokenizer("qwen2_5_instruct")
    train, _ = load_sft_splits(DataConfig(train_files=[str(path)]), tokenizer, 0, False)
    texts = [tokenizer.decode(train[index].input_ids) for index in range(2)]
    assert (
        '{"name": "weather", "arguments": {"city": "Oslo", "where": {"zip": "0150"}}}' in texts[0]
    )
    assert '{"name": "add", "arguments": {"a": 1, "b": 2}}' in texts[1]
    assert all("null" not in text and "None" not in text for text in texts), texts
