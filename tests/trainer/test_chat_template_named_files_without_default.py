"""A tokenizer dir whose chat templates are only named files of additional_chat_templates/,
none of them default.jinja, and no chat_template.jinja: transformers reads those files
instead of tokenizer_config.json's chat_template, renders only the one named `default`, and
`mfsdp train sft` failed in one line blaming the data's first row. Now refused in one line
naming the folder and its templates, before launch and as the tokenizer is loaded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.model_dirs import drop_chat_template, tokenizer_config_edit, train
from trainer.config import ConfigError, ModelConfig
from trainer.model import load_tokenizer
from trainer.model_code import check_model_files
from trainer.model_source import resolve_model_source
from trainer.tiny import CHAT_TEMPLATE, build_tokenizer

FOLDER = "additional_chat_templates"


def _name_templates(directory: Path, *names: str) -> None:
    """Write the tiny chat template as each of `names` in `directory`'s named templates."""
    (directory / FOLDER).mkdir()
    for name in names:
        (directory / FOLDER / f"{name}.jinja").write_text(CHAT_TEMPLATE)


def _tokenizer_dir(root: Path, *names: str) -> Path:
    """The tiny tokenizer saved to `root/tokenizer`, its chat templates only `names` in
    additional_chat_templates/."""
    directory = root / "tokenizer"
    build_tokenizer().save_pretrained(directory)
    drop_chat_template(directory)
    _name_templates(directory, *names)
    return directory


def _assert_names_the_folder(said: str, directory: Path) -> None:
    assert said.startswith(f"{directory / FOLDER}/: named chat templates ('tool_use.jinja')")
    assert f"copy one of them to {directory / 'chat_template.jinja'}" in said
    assert "\n" not in said


def test_named_templates_without_default_are_refused_as_the_tokenizer_loads(tmp_path):
    directory = _tokenizer_dir(tmp_path, "tool_use")
    with pytest.raises(ConfigError) as refused:
        load_tokenizer(ModelConfig(tokenizer=str(directory)))
    _assert_names_the_folder(str(refused.value), directory)


def test_named_templates_without_default_are_refused_before_launch(tmp_path):
    directory = _tokenizer_dir(tmp_path, "tool_use")
    cfg = ModelConfig(tokenizer=str(directory))
    with pytest.raises(ConfigError) as refused:
        check_model_files(cfg, resolve_model_source(cfg))
    _assert_names_the_folder(str(refused.value), directory)


def test_tokenizer_config_template_is_not_read_beside_named_templates(tmp_path):
    """transformers takes the folder's templates instead of tokenizer_config.json's text."""
    directory = _tokenizer_dir(tmp_path, "tool_use")
    tokenizer_config_edit(chat_template=CHAT_TEMPLATE)(directory)
    with pytest.raises(ConfigError) as refused:
        load_tokenizer(ModelConfig(tokenizer=str(directory)))
    _assert_names_the_folder(str(refused.value), directory)


def test_a_default_named_template_is_the_template(tmp_path):
    directory = _tokenizer_dir(tmp_path, "default")
    tokenizer = load_tokenizer(ModelConfig(tokenizer=str(directory)))
    assert tokenizer.get_chat_template() == CHAT_TEMPLATE


def test_chat_template_jinja_is_the_default_beside_named_templates(tmp_path):
    directory = _tokenizer_dir(tmp_path, "tool_use")
    (directory / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    tokenizer = load_tokenizer(ModelConfig(tokenizer=str(directory)))
    assert tokenizer.get_chat_template() == CHAT_TEMPLATE


def test_sft_from_a_model_dir_with_named_templates_only_fails_in_one_line(tmp_path, trainable):
    source, sft_table = trainable
    model = Path(shutil.copytree(source, tmp_path / "model"))
    drop_chat_template(model)
    _name_templates(model, "tool_use")
    code, err = train(
        "sft",
        f"model.path={model}",
        f"trainer.run_dir={tmp_path / 'run'}",
        f"data.train_files={sft_table}",
        *("trainer.total_steps=1", "trainer.eval_every=0", "checkpoint.save_every=0"),
    )
    assert code == 2, err
    one_error(err, f"{model / FOLDER}/: named chat templates ('tool_use.jinja')")
