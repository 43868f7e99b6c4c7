"""`data.chat_columns` left out is decided by the keys the config gives, not their values.

`auto` read a config by its values: `prompt_key: prompt` written in the YAML (or
`data.prompt_key=prompt` typed) is the default's value, so a row holding both `messages` and
prompt/response columns trained its chat although the user named the prompt key. A config
that gives `data.prompt_key` or `data.response_key`, at any value, and no
`data.chat_columns`, now trains the prompt and response; one that gives neither, or gives
`chat_columns: auto` (as every config.yaml a run writes does), reads rows as before.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.config_defaults import defaults_text
from trainer.config import SFTConfig, load_config, write_resolved_config
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import GRPOConfig
from trainer.tiny import build_tokenizer

CHAT = [{"role": "user", "content": "MSG-Q"}, {"role": "assistant", "content": "MSG-A"}]
ROW = {"messages": CHAT, "prompt": "PR-Q", "response": "PR-A"}


def _trained(tmp_path, yaml_text: str | None, overrides: list[str]) -> str:
    """The text the first row trains on (its loss-masked tokens decoded)."""
    data = tmp_path / "both.parquet"
    pq.write_table(pa.Table.from_pylist([ROW] * 2), data)
    config = None
    if yaml_text is not None:
        config = tmp_path / "config.yaml"
        config.write_text(yaml_text)
    keys = [f"data.train_files=[{data}]", "data.val_ratio=0", *overrides]
    cfg = load_config(SFTConfig, config, keys)
    tokenizer = build_tokenizer()
    first = load_sft_splits(cfg.data, tokenizer, 0, False)[0][0]
    return tokenizer.decode([t for t, mask in zip(first.input_ids, first.loss_mask) if mask])


@pytest.mark.parametrize(
    "yaml_text, overrides",
    [
        ("data:\n  prompt_key: prompt\n", []),
        ("data:\n  response_key: response\n", []),
        (None, ["data.prompt_key=prompt"]),
        ("data:\n  max_length: 512\n", ["data.response_key=response"]),
    ],
    ids=["file-prompt-key", "file-response-key", "override", "file-and-override"],
)
def test_a_prompt_key_given_at_its_default_trains_the_prompt_and_response(
    tmp_path, yaml_text, overrides
):
    assert _trained(tmp_path, yaml_text, overrides).startswith("PR-A")


@pytest.mark.parametrize(
    "yaml_text, overrides",
    [
        ("data:\n  max_length: 512\n", []),
        ("data:\n  prompt_key: prompt\n  chat_columns: auto\n", []),
        ("data:\n  prompt_key: prompt\n", ["data.chat_columns=auto"]),
        ("data:\n  prompt_key: prompt\n", ["data.chat_columns=messages"]),
    ],
    ids=["not-given", "auto-in-file", "auto-override", "messages-override"],
)
def test_without_a_prompt_key_or_with_chat_columns_given_the_chat_trains(
    tmp_path, yaml_text, overrides
):
    assert _trained(tmp_path, yaml_text, overrides).startswith("MSG-A")


def test_a_config_a_run_wrote_reads_back_as_that_run_read_its_rows(tmp_path):
    """Every key is written into a run's config.yaml, prompt_key among them: read back as
    `--config RUN/config.yaml`, it trains what the run trained."""
    run = tmp_path / "run"
    written = write_resolved_config(run, load_config(SFTConfig, None, []))
    assert "prompt_key: prompt" in written.read_text()
    assert _trained(tmp_path, written.read_text(), []).startswith("MSG-A")
    defaults = tmp_path / "defaults.yaml"
    defaults.write_text(defaults_text("sft"))
    assert load_config(SFTConfig, defaults) == SFTConfig()


def test_grpo_configs_are_left_as_given(tmp_path):
    path = tmp_path / "grpo.yaml"
    path.write_text("data:\n  prompt_key: prompt\n")
    assert load_config(GRPOConfig, path).data.prompt_key == "prompt"
