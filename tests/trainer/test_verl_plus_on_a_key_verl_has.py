"""`+key=value` on a key verl's config already holds at a value: Hydra refuses it ("Could
not append to config. An item is already at '...'") and verl does not start, so the
conversion is refused in one line naming the key (exit 2), as other overrides verl does
not start on are. Was: converted at exit 0, "every key carried over". Hydra's `++`
(add or override), a `+` after the key is deleted or set to null, and a mapping or list
(merged) are what Hydra takes, and are read as before."""

from __future__ import annotations

import pytest

from trainer.verl_import import VerlSourceError, convert_verl

GRPO = (
    "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_files=/d/t.parquet"
    " actor_rollout_ref.model.path=/m/q"
)
SFT = "torchrun -m verl.trainer.sft_trainer data.train_files=/d/t.parquet model.path=/m/q"


@pytest.mark.parametrize(
    ("command", "key"),
    [
        (GRPO, "actor_rollout_ref.actor.optim.lr=2e-6"),
        (GRPO, "trainer.total_epochs=2"),
        (GRPO, "actor_rollout_ref.rollout.n=8"),
        (GRPO, "actor_rollout_ref.actor.optim.weight_decay=0.1"),
        (SFT, "optim.lr=1e-5"),
        (SFT, "data.train_batch_size=64"),
    ],
)
def test_refused_naming_the_key(tmp_path, command, key):
    script = tmp_path / "run.sh"
    script.write_text(f"{command} +{key}\n")
    name = key.partition("=")[0]
    with pytest.raises(VerlSourceError) as err:
        convert_verl(script)
    assert str(err.value) == (
        f"{script}: +{name}: verl's config already has {name}, so Hydra refuses to add it"
        f" (\"Could not append to config. An item is already at '{name}'\") and verl does not"
        f" start; write {name}=... without +"
    )


@pytest.mark.parametrize(
    "overrides",
    [
        "++trainer.total_epochs=2",
        "~trainer.total_epochs +trainer.total_epochs=2",
        "trainer.total_epochs=null +trainer.total_epochs=2",
        "trainer.total_epochs=2",
    ],
)
def test_what_hydra_adds_is_read(tmp_path, overrides):
    script = tmp_path / "run.sh"
    script.write_text(f"{GRPO} {overrides}\n")
    assert convert_verl(script).tree["trainer"]["epochs"] == 2


def test_a_list_is_merged_as_hydra_merges_it(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(f"{GRPO} '+actor_rollout_ref.actor.optim.betas=[0.9,0.95]'\n")
    assert convert_verl(script).tree["optim"]["betas"] == [0.9, 0.95]
