"""A chat template is compiled whole to render the rows, so it may be of a template's size
(MAX_TEMPLATE_BYTES), refused up front naming its file and size: a sparse 900 MB
chat_template.jinja passed as a generic asset (1 GiB), took 3.2 GB to compile and was then
blamed on the first row's render time. So is one in tokenizer_config.json."""

from __future__ import annotations

import os

import pytest
from transformers import AutoTokenizer

from mfsdp_ckpt.convert.export_source import MAX_TEMPLATE_BYTES
from trainer.config import ConfigError
from trainer.data.chat import ChatFormatError, row_limit
from trainer.model_assets import check_asset_dir
from trainer.tiny import build_tokenizer

TOO_LONG = MAX_TEMPLATE_BYTES + 1


def test_a_template_file_over_a_templates_size_is_refused_naming_it(tmp_path):
    build_tokenizer().save_pretrained(tmp_path)
    template = tmp_path / "chat_template.jinja"
    os.truncate(template, TOO_LONG)
    with pytest.raises(ConfigError) as err:
        check_asset_dir(tmp_path, None)
    assert str(err.value) == (
        f"{template}: {TOO_LONG} bytes, more than the {MAX_TEMPLATE_BYTES} this file may have"
    )


def test_a_template_in_tokenizer_config_over_a_templates_size_is_refused_naming_it(tmp_path):
    tokenizer = build_tokenizer()
    tokenizer.chat_template += "{#" + "x" * MAX_TEMPLATE_BYTES + "#}"
    tokenizer.save_pretrained(tmp_path, save_jinja_files=False)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    size = len(loaded.get_chat_template())
    with pytest.raises(ChatFormatError) as err:
        row_limit(loaded, "data.max_length", 64)
    assert str(err.value) == (
        f"the chat template in {tmp_path / 'tokenizer_config.json'}: {size} characters, more"
        f" than the {MAX_TEMPLATE_BYTES} a chat template may have (real ones are a few KB)"
    )
