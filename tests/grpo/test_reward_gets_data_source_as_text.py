"""A reward function is given a row's `data_source` as text: a null cell as "" (as a missing
key is, and as docs/grpo.md says), a binary column's value decoded as UTF-8. `str()` of them
gave it 'None' and "b'openai/gsm8k'", which a reward that dispatches on the source routed
elsewhere without a word. Binary data that is no UTF-8, and any other value, is refused
naming file, row and column, by train's loader and by `mfsdp config check`. The ground truth
and extra_info are given as the file holds them (`test_custom_reward_*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _table(tmp_path: Path, sources: list[Any], kind: pa.DataType) -> Path:
    """Rows whose data_source column, of type `kind`, holds `sources`."""
    count = len(sources)
    table = pa.table(
        {
            "prompt": [[{"role": "user", "content": f"What is {i} + 1?"}] for i in range(count)],
            "data_source": pa.array(sources, type=kind),
            "reward_model": [{"ground_truth": str(i + 1)} for i in range(count)],
        }
    )
    path = tmp_path / "rl.parquet"
    pq.write_table(table, path)
    return path


def _given(path: Path, tokenizer: Any) -> list[str]:
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), tokenizer, custom_reward=True)
    return [prompt.data_source for prompt in prompts]


def test_a_null_data_source_is_given_as_empty_text(tmp_path, tokenizer):
    path = _table(tmp_path, ["openai/gsm8k", None], pa.string())
    assert _given(path, tokenizer) == ["openai/gsm8k", ""]


def test_a_binary_data_source_is_given_decoded(tmp_path, tokenizer):
    path = _table(tmp_path, [b"openai/gsm8k", "sè".encode(), None], pa.binary())
    assert _given(path, tokenizer) == ["openai/gsm8k", "sè", ""]


@pytest.mark.parametrize(
    "value, kind, why",
    [
        (
            b"\xff\xfe",
            pa.binary(),
            "data_source is binary data that is not UTF-8 text (b'\\xff\\xfe')",
        ),
        (7, pa.int64(), "data_source is int 7, not text (a reward function is given it as text)"),
    ],
)
def test_a_data_source_with_no_text_is_refused_naming_the_row(
    tmp_path, tokenizer, value, kind, why
):
    path = _table(tmp_path, [value], kind)
    with pytest.raises(MfsdpError) as caught:
        _given(path, tokenizer)
    assert str(caught.value) == f"{path} row 1: {why}"
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(**kwargs):\n    return 0.0\n")
    given = [f"data.train_files={path}", f"reward.path={reward}", "trainer.device=cpu"]
    with pytest.raises(MfsdpError) as checked:
        check_config("grpo", None, given)
    assert (str(checked.value), checked.value.exit_code) == (str(caught.value), 2)
