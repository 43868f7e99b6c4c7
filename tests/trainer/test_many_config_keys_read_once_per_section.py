"""A config of thousands of keys is read in work linear in its keys: each section's field
types are read once (`verl_keys.field_types`), not once per key, and the run's keys once, not
once per key group. `config from-verl` of 8000 keys took 73 s, `train sft --config` of
45,000 keys 260 s before naming the first unknown key."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import yaml

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl
from trainer.verl_keys import field_types

KEYS = 500


def _sections(cls: type) -> set[type]:
    """`cls` and every config section within it."""
    found = {cls}
    for kind in typing.get_type_hints(cls).values():
        if dataclasses.is_dataclass(kind):
            found |= _sections(typing.cast(type, kind))
    return found


SECTIONS = len(_sections(SFTConfig) | _sections(GRPOConfig))


def _flat_config(tmp_path, section: str) -> str:
    path = tmp_path / "many.yaml"
    tree = {"data": {"train_batch_size": 8}, section: {f"k{i}": 1 for i in range(KEYS)}}
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return str(path)


def test_from_verl_reads_each_sections_types_once(tmp_path):
    field_types.cache_clear()
    conversion = convert_verl(_flat_config(tmp_path, "trainer"))
    assert len(conversion.dropped) == KEYS
    assert field_types.cache_info().misses <= SECTIONS


def test_train_config_names_the_first_unknown_key_reading_each_sections_types_once(tmp_path):
    field_types.cache_clear()
    with pytest.raises(ConfigError, match=r"unknown config key 'trainer\.k0'"):
        load_config(SFTConfig, _flat_config(tmp_path, "trainer"))
    assert field_types.cache_info().misses <= SECTIONS


def test_unmapped_verl_keys_are_counted_reading_each_sections_types_once(tmp_path):
    field_types.cache_clear()
    with pytest.raises(ConfigError, match=f"{KEYS - 1} more key"):
        load_config(GRPOConfig, _flat_config(tmp_path, "actor_rollout_ref"))
    assert field_types.cache_info().misses <= SECTIONS
