"""Whether a prompt text is chat turns written out (`chat_written_as_text`) is decided within
bounds: a text the parsers fail on, however it fails, reads as a prompt, and what a text
costs to look at is bounded whatever its size, while a chat written out is refused at any
length of its turns.

Was: every `[...]` text was parsed, as JSON and then as a Python literal, whole. A 6 KB
prompt `[------...]` made Python 3.11's parser raise MemoryError, which train and
`mfsdp config check` reported as the machine out of memory (exit 1); one 6 MB cell
`[1,1,...]` took 2.9 GB and 41 s per row.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.config_check import check_config
from trainer.data.chat_as_text import chat_written_as_text

REPO = Path(__file__).resolve().parents[3]

KEYS = ", 'role', 'content']"  # a text naming the keys is looked at more closely
# texts Python's parser fails on (MemoryError past its stack, RecursionError, SyntaxError)
FAILING = {
    "unary signs": "[" + "-" * 6000 + "]",
    "unary ops with keys": "[" + "~" * 6000 + "1" + KEYS,
    "signs over lines": "[" + "-\n" * 6000 + "1" + KEYS,
    "signed nesting": "[" + "{1:-" * 199 + "1" + "}" * 199 + KEYS,
    "not chain": "[" + "not " * 6000 + "1" + KEYS,
    "sum chain": "[" + "1+" * 9000 + "1" + KEYS,
    "nested brackets": "[" * 1200 + "]" * 1200 + KEYS,
}


@pytest.mark.parametrize("text", FAILING.values(), ids=list(FAILING))
def test_a_text_the_parsers_fail_on_is_a_prompt(text):
    assert chat_written_as_text(text, "prompt") is None


def test_config_check_reads_it_as_a_prompt(tmp_path: Path):
    path = tmp_path / "rows.jsonl"
    row = {"prompt": FAILING["unary signs"], "response": "5", "data_source": "openai/gsm8k"}
    path.write_text(json.dumps(dict(row, reward_model={"ground_truth": "5"})) + "\n")
    grpo = ["data.max_prompt_length=256", "rollout.max_response_length=256"]
    for trainer, more in (("grpo", grpo), ("sft", ["data.prompt_key=prompt"])):
        check_config(trainer, None, [f"data.train_files={path}", "trainer.device=cpu", *more])


# How much a look at a 600 KB `[1,1,...]` naming the keys grows the peak memory of a fresh
# process: parsed as a literal it held ~290 MB
PROBE = """
import resource, sys
sys.path.insert(0, sys.argv[1])
from trainer.data.chat_as_text import chat_written_as_text
text = "[" + "1," * 300_000 + "'role', 'content']"
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
found = chat_written_as_text(text, "prompt")
print(found, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10)
"""


def test_a_big_text_costs_a_bounded_look():
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found, grew_mib = done.stdout.split()
    assert found == "None" and int(grew_mib) < 32, done.stdout


@pytest.mark.parametrize("form", ["JSON", "a Python literal"])
def test_a_chat_written_out_is_refused_however_long_its_turns(form):
    turns = [{"role": "user", "content": "x" * (2 << 20)}, {"role": "assistant", "content": "5"}]
    text = json.dumps(turns) if form == "JSON" else str(turns)
    found = chat_written_as_text(text, "prompt")
    assert found and found.startswith(f"'prompt' is text holding chat turns written out as {form}")
