"""`{hidden_size:256}` is one key to YAML (no space after the colon): it was refused as "not
a field of Qwen2Config; did you mean hidden_size?", which did not say what was wrong."""

from __future__ import annotations

import pytest

from tests.support.cli_errors import one_error
from tests.support.model_dirs import train
from tests.support.sft import write_chat_jsonl
from trainer.yaml_colon_keys import glued_value_hint

HINT = "YAML reads this as one key, as no space follows the colon; write {hidden_size: 256}"


def test_a_key_holding_its_value_says_how_to_write_it():
    assert glued_value_hint("hidden_size:256") == HINT
    assert glued_value_hint("rope_scaling:{type:linear}").endswith(
        "write {rope_scaling: {type:linear}}"
    )


@pytest.mark.parametrize("key", ["hidden_size", "hidden_size:", ":256", "a: b", 3, None])
def test_other_keys_get_no_hint(key):
    assert glued_value_hint(key) is None


def test_an_override_written_without_the_space_is_named_so(tmp_path):
    code, err = train(
        "sft",
        "model.overrides={hidden_size:256}",
        f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.total_steps=1",
        f"data.train_files={write_chat_jsonl(tmp_path / 'train.jsonl', rows=24)}",
    )
    assert code == 2, err
    one_error(err, f"model.overrides.hidden_size:256: {HINT}")


def test_a_config_key_glued_to_its_value_is_told_how_to_write_it():
    """`optim: {lr:0.1}` in a config file is the key `lr:0.1`: it was refused as unknown with
    a "did you mean" that did not say what was wrong."""
    from trainer.config import ConfigError, SFTConfig, load_config

    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, ["optim={lr:0.1}"])
    assert str(err.value).endswith(
        "optim.lr:0.1: YAML reads this as one key, as no space follows the colon; write {lr: 0.1}"
    ), err.value
