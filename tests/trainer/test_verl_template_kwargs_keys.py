"""`data.apply_chat_template_kwargs.enable_thinking=false` was an unknown key whose hint named
the very key refused; it is refused as the mapping form is. verl's use_remove_padding note
said sequences are always packed, where data.packing=false pads."""

import logging

import pytest

from trainer.config import ConfigError, DataConfig, SFTConfig, load_config
from trainer.config_suggestions import unknown_key_message


@pytest.mark.parametrize("plus", ["", "+"])
def test_a_key_inside_apply_chat_template_kwargs_is_refused_as_the_mapping_is(plus):
    given = f"{plus}data.apply_chat_template_kwargs.enable_thinking=false"
    with pytest.raises(ConfigError) as dotted:
        load_config(SFTConfig, None, ["data.train_files=[x.jsonl]", given])
    with pytest.raises(ConfigError) as whole:
        load_config(
            SFTConfig,
            None,
            [
                "data.train_files=[x.jsonl]",
                "data.apply_chat_template_kwargs={enable_thinking: false}",
            ],
        )
    reason = "' has no equivalent here: extra chat template arguments are not supported"
    key = "verl key 'data.apply_chat_template_kwargs="
    # the mapping as typed where typed whole; the one the dotted key made, as Python writes it
    assert f"{key}{{enable_thinking: false}}{reason}" in str(whole.value), whole.value
    assert f"{key}{{'enable_thinking': False}}{reason}" in str(dotted.value), dotted.value


def test_a_hint_never_names_the_key_refused():
    said = unknown_key_message(DataConfig, "data.", "apply_chat_template_kwargs", "x", "sft")
    assert "did you mean data.apply_chat_template_kwargs" not in said


def test_the_use_remove_padding_note_names_data_packing(caplog):
    with caplog.at_level(logging.WARNING):
        load_config(
            SFTConfig,
            None,
            ["data.train_files=[x.jsonl]", "data.packing=false", "use_remove_padding=false"],
        )
    assert "use_remove_padding is ignored: padding follows data.packing" in caplog.text
    assert "always packed" not in caplog.text
