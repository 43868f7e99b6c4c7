"""verl's `data.prompt_dict_keys: null` / `response_dict_keys: null` (the values its
sft_trainer.yaml prints; its SFTDataset reads `[] if not prompt_dict_keys`) are no keys, `[]`.
Was: "expects a list of strings, got null", so a verl config or script carried over stopped.
Other lists keep refusing null. A one-element list where a column name is expected
(`data.prompt_key=[extra_info]`, verl reads its first element) stays refused, and the
message gives the name to write instead."""

from __future__ import annotations

import pytest
import yaml

from trainer.config import ConfigError, SFTConfig, load_config


def _file(tmp_path, data: dict) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"data": {"train_files": ["/d/t.parquet"], **data}}))
    return str(path)


@pytest.mark.parametrize("key", ["prompt_dict_keys", "response_dict_keys"])
def test_a_null_dict_keys_override_is_no_keys(key):
    cfg = load_config(SFTConfig, None, ["data.train_files=/d/t.parquet", f"data.{key}=null"])
    assert getattr(cfg.data, key) == []


def test_null_dict_keys_in_a_config_file_are_no_keys(tmp_path):
    path = _file(tmp_path, {"prompt_dict_keys": None, "response_dict_keys": None})
    cfg = load_config(SFTConfig, path)
    assert (cfg.data.prompt_dict_keys, cfg.data.response_dict_keys) == ([], [])


def test_null_dict_keys_in_verls_sft_config_are_no_keys(tmp_path):
    """The data section of verl's fsdp_sft_trainer sft_trainer.yaml, as it prints it: a
    file verl's keys mark as verl's read its nulls as mfsdp's defaults before, and still does."""
    verl_data = {
        "micro_batch_size_per_gpu": 4,
        "prompt_key": "question",
        "response_key": "answer",
        "prompt_dict_keys": None,
        "response_dict_keys": None,
    }
    cfg = load_config(SFTConfig, _file(tmp_path, verl_data))
    assert (cfg.data.prompt_dict_keys, cfg.data.response_dict_keys) == ([], [])
    assert cfg.data.prompt_key == "question"


def test_given_dict_keys_are_kept():
    cfg = load_config(
        SFTConfig, None, ["data.train_files=/d/t.parquet", "data.prompt_dict_keys=[question]"]
    )
    assert cfg.data.prompt_dict_keys == ["question"]


def test_another_lists_null_is_still_refused():
    with pytest.raises(
        ConfigError, match=r"'data\.train_files' expects a list of strings, got null"
    ):
        load_config(SFTConfig, None, ["data.train_files=null"])


def test_a_column_key_given_a_list_of_one_names_the_column_to_write():
    with pytest.raises(ConfigError) as raised:
        load_config(
            SFTConfig, None, ["data.train_files=/d/t.parquet", "data.prompt_key=[extra_info]"]
        )
    assert str(raised.value).endswith(
        "config key 'data.prompt_key' expects a string, got [extra_info];"
        " give extra_info alone, not a list: data.prompt_key=extra_info"
    )


def test_in_a_config_file_the_yaml_form_is_given(tmp_path):
    with pytest.raises(ConfigError) as raised:
        load_config(SFTConfig, _file(tmp_path, {"response_key": ["answer"]}))
    assert str(raised.value).endswith("; give answer alone, not a list: response_key: answer")


def test_a_list_of_several_gets_no_one_value_to_write():
    with pytest.raises(ConfigError) as raised:
        load_config(SFTConfig, None, ["data.train_files=/d/t.parquet", "data.prompt_key=[a,b]"])
    assert str(raised.value).endswith("expects a string, got [a,b]")
