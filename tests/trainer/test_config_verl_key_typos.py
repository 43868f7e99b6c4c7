"""A typo of a verl key name is told the verl key meant, with its key here: the README tells
verl users their keys work as they are, and a typo of one was matched against mfsdp's names
alone (`trainer.save_freqs`: "did you mean trainer.seed, trainer.eval_every, ...")."""

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig


@pytest.mark.parametrize(
    "cls, given, meant",
    [
        (SFTConfig, "trainer.save_freqs=2", "trainer.save_freq (checkpoint.save_every here)"),
        (SFTConfig, "model.partial_pretrian=x", "model.partial_pretrain (model.path here)"),
        (GRPOConfig, "trainer.save_frq=5", "trainer.save_freq (checkpoint.save_every here)"),
        (
            SFTConfig,
            "data.train_bath_size=8",
            "data.train_batch_size (data.global_batch_size here)",
        ),
        (
            GRPOConfig,
            "actor_rollout_ref.rollout.temprature=0.7",
            "actor_rollout_ref.rollout.temperature (rollout.temperature here)",
        ),
    ],
)
def test_a_typo_of_a_verl_key_suggests_it_first(cls, given, meant):
    with pytest.raises(ConfigError) as err:
        load_config(cls, None, [given])
    assert f"did you mean {meant}" in str(err.value), err.value


def test_a_verl_key_of_the_other_command_is_not_suggested():
    """SFT's verl `data.micro_batch_size_per_gpu` is refused by GRPO: not suggested there."""
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, None, ["data.micro_batch_size_per_gpux=1"])
    assert "data.micro_batch_size_per_gpu (" not in str(err.value)


def test_a_typo_of_an_mfsdp_key_still_finds_it_first():
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, ["trainer.eval_evry=2"])
    assert "did you mean trainer.eval_every," in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, ["optim.lrr=1"])
    assert "did you mean optim.lr" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, ["optim.warmup=1"])
    assert "did you mean optim.warmup_steps, optim.warmup_ratio, optim.warmup_style (" in str(
        err.value
    )
