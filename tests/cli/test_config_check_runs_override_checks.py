"""`mfsdp config check` refuses the `model.overrides` that `mfsdp train` refuses before its
first step, with train's line (`build_hf_config`, shared): a misspelt key, text where
transformers takes a bool and an activation it lacks passed the check (ok, exit 0), and
train refused them only after torch had loaded on every node."""

from __future__ import annotations

import pytest
from transformers import Qwen2Config

from cli.config_check import check_config
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError
from trainer.tiny import build_tokenizer, tiny_config_kwargs

REFUSED = [
    (
        "{rope_thetaa: 1}",
        "model.overrides.rope_thetaa: not a field of Qwen2Config (the qwen2 config)",
    ),
    (
        '{tie_word_embeddings: "false"}',
        "model.overrides.tie_word_embeddings: transformers refuses it (Field"
        " 'tie_word_embeddings' expected bool, got str (value: 'false'))",
    ),
    (
        "{hidden_act: nope}",
        "model.overrides.hidden_act: nope is no activation transformers has; one of",
    ),
    (
        "{hidden_act: sulu}",
        "model.overrides.hidden_act: sulu is no activation transformers has; did you mean silu?",
    ),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A Qwen2 model dir holding only config.json and the tokenizer (random_init reads no
    weights), and an SFT table (the check reads its first row)."""
    root = tmp_path_factory.mktemp("model")
    tokenizer = build_tokenizer()
    Qwen2Config(**tiny_config_kwargs(len(tokenizer))).save_pretrained(root)
    tokenizer.save_pretrained(root)
    write_chat_jsonl(root / "train.jsonl", rows=1)
    return root


def _check(model_dir, tmp_path, overrides: str) -> None:
    check_config(
        "sft",
        None,
        [
            f"model.path={model_dir}",
            "model.random_init=true",
            f"data.train_files={model_dir / 'train.jsonl'}",
            f"trainer.run_dir={tmp_path / 'run'}",
            f"model.overrides={overrides}",
        ],
    )


@pytest.mark.parametrize(("overrides", "line"), REFUSED)
def test_overrides_train_refuses_are_refused(model_dir, tmp_path, overrides, line):
    with pytest.raises(ConfigError) as caught:
        _check(model_dir, tmp_path, overrides)
    assert str(caught.value).startswith(line), caught.value
    assert not (tmp_path / "run").exists()


def test_overrides_train_takes_pass(model_dir, tmp_path):
    _check(model_dir, tmp_path, "{num_hidden_layers: 1, hidden_act: gelu}")
    assert not (tmp_path / "run").exists()
