"""A prompt cell holding its chat turns written out as text (JSON, a Python literal or numpy's
text of an array: what a CSV round trip or `df.astype(str)` leaves) is refused naming file,
row and column, in a GRPO `prompt` and an SFT prompt alike, by train's loader and by
`mfsdp config check`: it trained as literal text (the policy asked `[{"content": ...}]`),
exit 0, while the same mistake in an SFT `messages` column was refused. A plain prompt that
starts with `[` still reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from trainer.config import SFTConfig, load_config
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

TURNS = [{"role": "user", "content": "What is 2 + 3?"}]
# pandas' astype(str) or to_csv of a parquet list cell: numpy's text of the array it holds
NUMPY = str(np.array([*TURNS, {"role": "assistant", "content": "5"}], dtype=object))
WRITTEN = {
    "JSON": json.dumps(TURNS),
    "a Python literal": str(TURNS),
    "numpy's text of an array": NUMPY,
}
# texts that start with `[` and are prompts, not turns written out
PLAIN = ["[1, 2, 3] sorted?", "[]", '[{"role": "user"}]', "[x for x in y]", "[" * 1200 + "]" * 1200]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _write(tmp_path: Path, prompts: list[str]) -> Path:
    path = tmp_path / "rows.jsonl"
    rows = [
        {
            "prompt": prompt,
            "response": "5",
            "data_source": "openai/gsm8k",
            "reward_model": {"ground_truth": "5"},
        }
        for prompt in prompts
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _refusal(path: Path, line: int, form: str) -> str:
    return f"{path}:{line}: 'prompt' is text holding chat turns written out as {form}"


def _sft(path: Path) -> SFTConfig:
    given = [f"data.train_files={path}", "data.prompt_key=prompt", "data.max_length=4096"]
    return load_config(SFTConfig, None, given)


@pytest.mark.parametrize("form", WRITTEN)
def test_grpo_loader_refuses_turns_written_as_text(tmp_path, tokenizer, form):
    path = _write(tmp_path, ["What is 1 + 1?", WRITTEN[form]])
    with pytest.raises(MfsdpError) as caught:
        load_rl_prompts([str(path)], RLDataConfig(), tokenizer)
    assert str(caught.value).startswith(_refusal(path, 2, form))


@pytest.mark.parametrize("form", WRITTEN)
def test_sft_loader_refuses_turns_written_as_text(tmp_path, tokenizer, form):
    path = _write(tmp_path, ["What is 1 + 1?", WRITTEN[form]])
    with pytest.raises(MfsdpError) as caught:
        load_sft_splits(_sft(path).data, tokenizer, seed=0, progress=False)
    assert str(caught.value).startswith(_refusal(path, 2, form))


@pytest.mark.parametrize("trainer", ["grpo", "sft"])
def test_config_check_refuses_them_with_trains_line(tmp_path, trainer):
    path = _write(tmp_path, [WRITTEN["JSON"]])
    overrides = [f"data.train_files={path}", "trainer.device=cpu"]
    if trainer == "sft":
        overrides.append("data.prompt_key=prompt")
    with pytest.raises(MfsdpError) as caught:
        check_config(trainer, None, overrides)
    assert str(caught.value).startswith(_refusal(path, 1, "JSON"))
    assert caught.value.exit_code == 2


def test_plain_prompts_starting_with_a_bracket_read(tmp_path, tokenizer):
    path = _write(tmp_path, PLAIN)
    cfg = RLDataConfig(max_prompt_length=8192)
    prompts, dropped = load_rl_prompts([str(path)], cfg, tokenizer)
    assert ([p.prompt[1] for p in prompts], dropped) == (PLAIN, 0)
    train, _ = load_sft_splits(_sft(path).data, tokenizer, seed=0, progress=False)
    assert [example.prompt[1] for example in train] == PLAIN
