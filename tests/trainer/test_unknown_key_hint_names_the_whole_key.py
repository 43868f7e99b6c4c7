"""An unknown key's hint is a whole key to type: `optimizer.lr=` was told "did you mean
optim.optimizer (verl's), optim, ...", whose first hint is a second error; a key of another
section (`trainer.lrr`) was told nothing."""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig


def _refusal(config: type, *overrides: str) -> str:
    with pytest.raises(ConfigError) as refused:
        load_config(config, None, ["data.train_files=[x.jsonl]", *overrides])
    return str(refused.value)


@pytest.mark.parametrize(
    "override, hint",
    [
        ("optimizer.lr=1e-3", "did you mean optim.lr?"),
        ("optimiser.lr=1e-3", "did you mean optim.lr?"),
        ("optimizer.lrr=1e-3", "did you mean optim.lr?"),
        ("dataa.max_length=8", "did you mean data.max_length?"),
        ("trainer.lrr=1e-3", "did you mean optim.lr?"),
        ("data.lr=1e-3", "did you mean optim.lr?"),
        ("model.overides.num_hidden_layers=2", "did you mean model.overrides.num_hidden_layers?"),
        ("model.pth=x", "did you mean model.path?"),
    ],
)
def test_an_unknown_sft_key_is_told_the_whole_key_meant(override, hint):
    said = _refusal(SFTConfig, override)
    assert said.startswith("command-line override: unknown config key ") and said.endswith(hint)


def test_a_key_of_another_section_comes_before_near_names_in_its_own():
    said = _refusal(SFTConfig, "trainer.lr=1e-3")
    assert "; did you mean optim.lr, " in said, said


def test_initials_elsewhere_do_not_outrank_a_near_name_in_the_section():
    said = _refusal(SFTConfig, "model.lora_rnk=4")
    assert "; did you mean model.lora_rank" in said and "optim.lr" not in said, said


def test_grpo_mends_a_section_below_another():
    assert _refusal(GRPOConfig, "actor.optimm.lr=1e-6").endswith("did you mean optim.lr?")


def test_a_misnamed_section_in_a_file_is_told_the_key_under_it(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("optimizer:\n  lr: 1.0e-3\n  weight_decay: 0.1\n")
    with pytest.raises(ConfigError) as refused:
        load_config(SFTConfig, path)
    said = str(refused.value)
    assert said == f"{path}: unknown config key 'optimizer'; did you mean optim.lr?", said
