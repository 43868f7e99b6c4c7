"""A tokenizer_config.json whose chat_template is no text (a number, a list of numbers, named
templates without a text `default`) and no chat_template.jinja beside it: transformers loads
the value, and `mfsdp train` ended in a traceback of 80 lines in the rank (the template
searched as text), transformers' own TypeError, or an error blaming the data's first row.
Now one line naming the key, exit 2, as a tokenizer without a template is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.model_dirs import drop_chat_template, tokenizer_config_edit, train
from trainer.config import ConfigError, ModelConfig
from trainer.model import load_tokenizer
from trainer.tiny import CHAT_TEMPLATE, build_tokenizer

KEY = "tokenizer_config.json [chat_template]"
NOT_TEXT = {
    "number": (5, f"{KEY}: 5 is not a string"),
    "default-a-number": ([{"name": "default", "template": 5}], "'default' template"),
    "list-of-numbers": ([5, 6], f"{KEY}[0]: 5 is not a named template"),
    "entry-without-template": ([{"name": "default"}], f"{KEY}[0]: "),
    "no-default": ([{"name": "tool_use", "template": CHAT_TEMPLATE}], "no template named"),
    "mapping-without-default": ({"tool_use": CHAT_TEMPLATE}, "no template named 'default'"),
}


def _tokenizer_dir(root: Path, template: object) -> Path:
    """The tiny tokenizer saved to `root/tokenizer`, its chat template only `template` in
    tokenizer_config.json."""
    directory = root / "tokenizer"
    build_tokenizer().save_pretrained(directory)
    drop_chat_template(directory)
    tokenizer_config_edit(chat_template=template)(directory)
    return directory


@pytest.mark.parametrize("case", list(NOT_TEXT))
def test_a_chat_template_that_is_no_text_is_refused_naming_the_key(tmp_path, case):
    template, words = NOT_TEXT[case]
    directory = _tokenizer_dir(tmp_path, template)
    with pytest.raises(ConfigError) as refused:
        load_tokenizer(ModelConfig(tokenizer=str(directory)))
    assert str(directory / "tokenizer_config.json") in str(refused.value)
    assert words in str(refused.value)
    assert "\n" not in str(refused.value)


def test_named_templates_with_a_text_default_load(tmp_path):
    """transformers renders the `default` one; another name's value is never rendered."""
    named = [{"name": "tool_use", "template": 5}, {"name": "default", "template": CHAT_TEMPLATE}]
    tokenizer = load_tokenizer(ModelConfig(tokenizer=str(_tokenizer_dir(tmp_path, named))))
    assert tokenizer.get_chat_template() == CHAT_TEMPLATE


def test_chat_template_jinja_is_the_template_whatever_tokenizer_config_holds(tmp_path):
    directory = _tokenizer_dir(tmp_path, 5)
    (directory / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    tokenizer = load_tokenizer(ModelConfig(tokenizer=str(directory)))
    assert tokenizer.get_chat_template() == CHAT_TEMPLATE


@pytest.mark.parametrize("kind", ["sft", "grpo"])
def test_training_from_a_model_dir_whose_template_is_a_number_fails_in_one_line(
    tmp_path, trainable, kind
):
    source, sft_table = trainable
    model = tmp_path / "model"
    shutil.copytree(source, model)
    drop_chat_template(model)
    tokenizer_config_edit(chat_template=5)(model)
    tables = sft_table.parent.parent
    data = (
        [f"data.train_files={sft_table}"]
        if kind == "sft"
        else [f"data.train_files={tables / 'rl' / 'train.parquet'}"]
        + [f"data.val_files={tables / 'rl' / 'test.parquet'}"]
    )
    code, err = train(
        kind,
        f"model.path={model}",
        f"trainer.run_dir={tmp_path / 'run'}",
        *data,
        *("trainer.total_steps=1", "trainer.eval_every=0", "checkpoint.save_every=0"),
    )
    assert code == 2, err
    one_error(err, f"{model / 'tokenizer_config.json'} [chat_template]: 5 is not a string")
