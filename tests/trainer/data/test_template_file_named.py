"""Errors about a row name the file the chat template came from as transformers read it:
chat_template.json beside tokenizer_config.json (a processor's file, which a tokenizer
never reads) was named, though the template rendered was tokenizer_config.json's."""

from __future__ import annotations

import json

from tests.support.model_dirs import drop_chat_template, tokenizer_config_edit
from trainer.config import ModelConfig
from trainer.data.chat import row_limit
from trainer.model import load_tokenizer
from trainer.tiny import CHAT_TEMPLATE, build_tokenizer


def test_a_processors_chat_template_json_is_not_named_as_the_template(tmp_path):
    directory = tmp_path / "tokenizer"
    build_tokenizer().save_pretrained(directory)
    drop_chat_template(directory)
    tokenizer_config_edit(chat_template=CHAT_TEMPLATE)(directory)
    (directory / "chat_template.json").write_text(json.dumps({"chat_template": "{{ 'x' }}"}))
    tokenizer = load_tokenizer(ModelConfig(tokenizer=str(directory)))
    assert tokenizer.chat_template == CHAT_TEMPLATE  # what transformers read
    limit = row_limit(tokenizer, "data.max_length", 64)
    assert limit.template == f"the chat template in {directory / 'tokenizer_config.json'}"
