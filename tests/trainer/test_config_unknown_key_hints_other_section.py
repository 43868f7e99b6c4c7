"""An unknown key whose only likeness in its own section is a verl name is told the mfsdp key
of another section first: `trainer.learning_rate` was "did you mean
trainer.total_training_steps", as a verl name found counted as the section's own key and
hid optim.lr. A verl key misspelt is still that verl key first."""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig


def hint(cls: type, override: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(cls, None, [override])
    return str(err.value).split("did you mean ", 1)[1]


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
def test_learning_rate_in_trainer_names_optim_lr_first(cls):
    assert hint(cls, "trainer.learning_rate=1e-5").startswith("optim.lr")


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
def test_a_misspelt_verl_key_is_still_named_first(cls):
    assert hint(cls, "trainer.save_freqs=2").startswith(
        "trainer.save_freq (checkpoint.save_every here)"
    )


@pytest.mark.parametrize(
    ("override", "meant"),
    [
        ("rollout_is=1", "algorithm.rollout_correction.rollout_is (verl's)"),
        ("skip_rollout=1", "actor_rollout_ref.rollout.skip_rollout (verl's)"),
    ],
)
def test_a_verl_key_with_the_very_leaf_typed_is_never_left_out(override, meant):
    """The hint's noise filter compared whole dotted names, so a verl key whose last part is
    exactly what was typed fell far below a short mfsdp section name and was left out."""
    assert meant in hint(GRPOConfig, override)
