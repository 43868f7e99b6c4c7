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
