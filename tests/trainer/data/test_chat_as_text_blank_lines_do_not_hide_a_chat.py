"""A chat written out as text and padded with blank lines (20,000 and more, before its first
turn or between turns) is refused as chat turns written out, by GRPO's and SFT's loaders
alike: the scan's bound on lines (as many as it counts tokens) read the padded chat as a
plain prompt, trained as literal brackets and keys, exit 0. Blank lines hold no token of
any form such a chat is written in, so they are dropped before the bound is counted, in one
pass over the text: the look stays linear in its size (test_chat_as_text_look_is_linear.py).
A text of more lines holding something than the bound still reads as a prompt, unscanned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfsdp_ckpt.errors import MfsdpError
from trainer.config import SFTConfig, load_config
from trainer.data import chat_as_text
from trainer.data.chat_as_text import chat_written_as_text
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

PAD = 2 * chat_as_text._MAX_TOKENS
TURNS = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}]
# each form a chat is written out in, padded before its first turn and between its turns
PADDED = {
    "JSON": "["
    + "\n" * PAD
    + json.dumps(TURNS[0])
    + ","
    + "\n \r\n\t" * PAD
    + json.dumps(TURNS[1])
    + "]",
    "a Python literal": "["
    + " \n" * PAD
    + repr(TURNS[0])
    + ","
    + "\n" * PAD
    + repr(TURNS[1])
    + "]",
    "numpy's text of an array": "[" + repr(TURNS[0]) + "\n" * PAD + " " + repr(TURNS[1]) + "]",
}


@pytest.mark.parametrize("form", PADDED)
def test_a_chat_padded_with_blank_lines_is_refused(form):
    why = chat_written_as_text(PADDED[form], "prompt")
    assert why is not None and why.startswith(
        f"'prompt' is text holding chat turns written out as {form}"
    )


def test_many_lines_holding_something_still_read_as_a_prompt():
    text = "[" + repr(TURNS[0]) + " 1\n" * PAD + "]"
    assert chat_written_as_text(text, "prompt") is None


def _write(tmp_path: Path, prompt: str) -> Path:
    path = tmp_path / "rows.jsonl"
    row = {
        "prompt": prompt,
        "response": "5",
        "data_source": "openai/gsm8k",
        "reward_model": {"ground_truth": "5"},
    }
    path.write_text(json.dumps(row) + "\n")
    return path


def test_grpo_and_sft_refuse_a_padded_chat_alike(tmp_path):
    tokenizer = build_tokenizer()
    path = _write(tmp_path, PADDED["JSON"])
    line = f"{path}:1: 'prompt' is text holding chat turns written out as JSON"
    with pytest.raises(MfsdpError) as grpo:
        load_rl_prompts([str(path)], RLDataConfig(), tokenizer)
    given = [f"data.train_files={path}", "data.prompt_key=prompt"]
    with pytest.raises(MfsdpError) as sft:
        load_sft_splits(load_config(SFTConfig, None, given).data, tokenizer, seed=0, progress=False)
    assert str(grpo.value).startswith(line) and str(sft.value).startswith(line)
