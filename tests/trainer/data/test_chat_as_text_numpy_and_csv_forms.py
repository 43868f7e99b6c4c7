"""A prompt cell holding its chat turns in any text a pandas, numpy or CSV round trip leaves is
refused naming the form, and a prompt that merely holds braces or brackets reads.

Was: only JSON and a Python literal were caught. pandas holds a parquet list cell as a numpy
array, and `df.astype(str)` or `to_csv` writes it with numpy's `str()`: the turns parted by
spaces and line breaks, no comma (`[{'role': 'system', ...}\\n {'role': 'user', ...}]`), which
is neither. A system+user or multi-turn prompt so written passed `mfsdp config check` and
trained as one user turn of literal text, exit 0; so did numpy's `repr()` (`array([...],
dtype=object)`), a turn's nested list written as `array(...)`, and a CSV field whose quotes a
reader kept.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from trainer.data.chat_as_text import chat_written_as_text
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

TURNS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]
SHORT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}] * 2
# what pandas holds for a turn whose content is a list (parquet list<struct>)
PARTS = [
    {"role": role, "content": np.array([{"type": "text", "text": text}], dtype=object)}
    for role, text in (("user", "hi"), ("assistant", "yo"))
]
BRACES = [{"role": "user", "content": "} {"}, {"role": "assistant", "content": "[1 2] {x}"}]
LONG = [{"role": "user", "content": str(i)} for i in range(1200)]  # numpy cuts it around `...`


def _array(turns: list[dict]) -> np.ndarray:
    return np.array(turns, dtype=object)


def _csv_field(text: str) -> str:
    """`text` as a CSV file holds it (what pandas' to_csv writes through csv.writer)."""
    out = io.StringIO()
    csv.writer(out).writerow([text])
    return out.getvalue().rstrip("\r\n")


NUMPY = "numpy's text of an array"
WRITTEN = {
    "numpy str, turns on lines": (str(_array(TURNS)), NUMPY),
    "numpy str, turns on one line": (str(_array(SHORT)), NUMPY),
    "numpy str, a turn's list nested": (str(_array(PARTS)), NUMPY),
    "numpy str, braces in turns": (str(_array(BRACES)), NUMPY),
    "numpy str, cut": (str(_array(LONG)), NUMPY),
    "numpy repr": (repr(_array(TURNS)), NUMPY),
    "numpy repr, a turn's list nested": (repr(_array(PARTS)), NUMPY),
    "numpy repr, cut": (repr(_array(LONG)), NUMPY),
    "CSV field of numpy str": (_csv_field(str(_array(TURNS))), f"{NUMPY} in CSV quotes"),
    "CSV field of JSON": (_csv_field(json.dumps(TURNS)), "JSON in CSV quotes"),
    "CSV field of a literal": (_csv_field(str(TURNS)), "a Python literal in CSV quotes"),
    "quotes doubled, field's off": (json.dumps(TURNS).replace('"', '""'), "JSON in CSV quotes"),
    "JSON, trailing whitespace": (json.dumps(TURNS, indent=2) + " \r\n\t", "JSON"),
    "JSON, an empty content": (json.dumps([{"role": "user", "content": ""}]), "JSON"),
}
# prompts holding braces, brackets and even the quoted keys, that are no chat written out
PLAIN = [
    "Fill in {name} and {place}: [a] [b]",
    '[{"role": ..., "content": ...}]',
    '[{"role": "user"} {"content": "hi"}]',
    '[{"role": "user", "content": answer}]',
    "[{'role'} {'content'}]",
    '[{"role": "a", "content": "b"} if x else {"role": "c", "content": "d"}]',
    '[f({"role": "user", "content": "hi"})]',
    '[array([{"role": "user", "content": "hi"}], copy=True)]',
    '[{"role": "user", "content": "hi"}, ...]',
    'Answer as [{"role": "user", "content": "..."}] only.',
    '"[{}]" quoted, "role" and "content"',
]


@pytest.mark.parametrize("text,form", WRITTEN.values(), ids=list(WRITTEN))
def test_chat_written_out_is_refused_naming_its_form(text, form):
    found = chat_written_as_text(text, "prompt")
    assert found and found.startswith(
        f"'prompt' is text holding chat turns written out as {form} ("
    )


@pytest.mark.parametrize("text", PLAIN)
def test_a_prompt_holding_braces_or_brackets_is_no_chat(text):
    assert chat_written_as_text(text, "prompt") is None


def test_the_loader_reads_them_as_prompts(tmp_path):
    path = tmp_path / "rows.jsonl"
    row = {"data_source": "openai/gsm8k", "reward_model": {"ground_truth": "5"}}
    path.write_text("".join(json.dumps(dict(row, prompt=text)) + "\n" for text in PLAIN))
    prompts, dropped = load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert ([p.prompt[1] for p in prompts], dropped) == (PLAIN, 0)


def test_config_check_refuses_a_parquet_of_astype_str_cells(tmp_path: Path):
    path = tmp_path / "astype_str.parquet"
    cells = [str(_array(TURNS))] * 2  # pandas' Series.astype(str) of read_parquet's cells
    table = {"prompt": cells, "data_source": ["openai/gsm8k"] * 2}
    table["reward_model"] = [{"style": "rule", "ground_truth": "2"}] * 2
    pq.write_table(pa.table(table), path)
    with pytest.raises(MfsdpError) as caught:
        check_config("grpo", None, [f"data.train_files={path}", "trainer.device=cpu"])
    assert str(caught.value).startswith(
        f"{path} row 1: 'prompt' is text holding chat turns written out as {NUMPY} ("
    )
    assert caught.value.exit_code == 2
