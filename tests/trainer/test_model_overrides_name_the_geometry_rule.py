"""`model.overrides` that make no model say which rule they break, as the same values in a
model dir's config.json do: the reason was dropped for one line naming every rule
("positive integers that divide (heads by KV heads)") for num_hidden_layers=2000."""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, SFTConfig, load_config

SAYS = {
    "num_hidden_layers=2000": "num_hidden_layers=2000 is over the 1024 allowed",
    "num_experts=100000": "num_experts=100000 is over the 16384 allowed",
    "num_local_experts=-1": "num_local_experts must be a count of experts, got -1",
    "hidden_size=0": "hidden_size must be a positive integer below 2**63 (int64), got 0",
}


@pytest.mark.parametrize("override", SAYS)
def test_an_override_names_the_rule_it_breaks(override):
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, [f"model.overrides.{override}"])
    assert str(err.value) == (
        f"command-line override: config key 'model.overrides': {SAYS[override]}"
    )
