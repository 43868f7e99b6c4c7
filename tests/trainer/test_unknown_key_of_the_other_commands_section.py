"""A section of mfsdp's GRPO config given to `mfsdp train sft` (`rollout.n=4`) is named as
GRPO's: likeness alone answered "did you mean model.lora.dropout (verl's)?"."""

from __future__ import annotations

import pytest
import yaml

from trainer.config import ConfigError, SFTConfig, load_config


@pytest.mark.parametrize("override", ["rollout.n=4", "actor.ppo_mini_batch_size=8"])
def test_a_grpo_section_given_to_sft_is_named_as_grpos(override):
    section = override.split(".", 1)[0]
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, [override])
    assert str(err.value) == (
        f"command-line override: unknown config key '{section}':"
        " a section of mfsdp train grpo, not sft"
    )


def test_the_same_in_a_yaml_file(tmp_path):
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump({"rollout": {"n": 4}}))
    with pytest.raises(ConfigError, match=r"'rollout': a section of mfsdp train grpo, not sft$"):
        load_config(SFTConfig, path)


def test_a_typo_of_a_section_both_have_still_gets_its_suggestion():
    with pytest.raises(ConfigError, match=r"unknown config key 'optimm'.*did you mean optim"):
        load_config(SFTConfig, None, ["optimm.lr=1e-3"])
