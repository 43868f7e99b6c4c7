"""A chat template that cannot render is named by the file transformers read it from. Was: a
template from additional_chat_templates/default.jinja (which transformers renders over
tokenizer_config.json's) was named as tokenizer_config.json's, a file whose template never
ran."""

from __future__ import annotations

import pytest

from tests.support.model_dirs import drop_chat_template, tokenizer_config_edit
from trainer.config import ModelConfig
from trainer.data.chat import ChatFormatError, chat_ids, row_limit
from trainer.model import load_tokenizer
from trainer.tiny import CHAT_TEMPLATE, build_tokenizer

BROKEN = "{{ raise_exception('no system turns') }}"
TURNS = [{"role": "user", "content": "hi"}]


def _render_error(directory) -> str:
    tokenizer = load_tokenizer(ModelConfig(tokenizer=str(directory)))
    with pytest.raises(ChatFormatError) as raised:
        chat_ids(tokenizer, TURNS, row_limit(tokenizer, "data.max_length", 64))
    return str(raised.value)


@pytest.fixture
def tokenizer_dir(tmp_path):
    directory = tmp_path / "tokenizer"
    build_tokenizer().save_pretrained(directory)
    drop_chat_template(directory)
    tokenizer_config_edit(chat_template=CHAT_TEMPLATE)(directory)  # renders: never the culprit
    return directory


def test_a_named_default_template_is_named_not_tokenizer_config(tokenizer_dir):
    folder = tokenizer_dir / "additional_chat_templates"
    folder.mkdir()
    (folder / "default.jinja").write_text(BROKEN)
    message = _render_error(tokenizer_dir)
    assert message.startswith(f"the chat template in {folder / 'default.jinja'} cannot render")
    assert "no system turns" in message


def test_chat_template_jinja_is_named_over_tokenizer_config(tokenizer_dir):
    (tokenizer_dir / "chat_template.jinja").write_text(BROKEN)
    message = _render_error(tokenizer_dir)
    jinja = tokenizer_dir / "chat_template.jinja"
    assert message.startswith(f"the chat template in {jinja} cannot render"), message
