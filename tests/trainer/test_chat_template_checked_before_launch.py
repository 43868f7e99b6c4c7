"""A chat template that is no text is refused by the launching process's check of the model
files (`check_model_files`), before any rank starts, naming the key: only each rank's
tokenizer load refused it, after torchrun had started them all."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.model_dirs import drop_chat_template, tokenizer_config_edit
from trainer.config import ConfigError, ModelConfig
from trainer.model_code import check_model_files
from trainer.model_source import resolve_model_source
from trainer.tiny import build_tokenizer


def _template_a_number(directory: Path) -> str:
    """Make `directory`'s chat template the number 5; what refusing it says."""
    drop_chat_template(directory)
    tokenizer_config_edit(chat_template=5)(directory)
    return f"{directory / 'tokenizer_config.json'} [chat_template]: 5 is not a string"


def _refused_before_launch(cfg: ModelConfig) -> str:
    with pytest.raises(ConfigError) as refused:
        check_model_files(cfg, resolve_model_source(cfg))
    return str(refused.value)


def test_a_model_dirs_template_that_is_a_number_is_refused_before_launch(trainable, tmp_path):
    model = Path(shutil.copytree(trainable[0], tmp_path / "model"))
    says = _template_a_number(model)
    assert _refused_before_launch(ModelConfig(path=str(model))).startswith(says)


def test_a_tokenizer_dirs_template_that_is_a_number_is_refused_before_launch(tmp_path):
    tokenizer = tmp_path / "tokenizer"
    build_tokenizer().save_pretrained(tokenizer)
    says = _template_a_number(tokenizer)
    assert _refused_before_launch(ModelConfig(tokenizer=str(tokenizer))).startswith(says)
