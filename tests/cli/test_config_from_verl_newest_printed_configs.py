"""verl's printed configs at 1dda039 (github.com/verl-project/verl, 2026-08-22) convert as
those at b178a3cd do: the keys verl added since (`trainer.use_v1`, `trainer.v1.*`, QAT,
context parallelism, Muon, `rollout.full_determinism`, `data.gen_batch_size`, DAPO's
`algorithm.filter_groups`, distillation, rollout caching) are each off at verl's default,
inert, or refused by name, and the keys verl renamed (`reward.reward_manager.name`,
`reward.reward_model.enable`) read as their old names. `mfsdp config from-verl` on verl's
1dda039 Megatron file listed 199 keys as "no such key here" and 3 at b178a3cd."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.trainer.test_verl_megatron_config_dump import FIXTURES, verls_megatron_file
from trainer.verl_import import convert_verl

NEWEST_FSDP = FIXTURES / "_generated_ppo_trainer.1dda039.yaml"
NEWEST_MEGATRON = FIXTURES / "_generated_ppo_megatron_trainer.1dda039.yaml"
# what verl's defaults set that mfsdp does not train, in both commits' files
REFUSED_AT_BOTH = {
    "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "algorithm.adv_estimator",
}


def dropped_keys(conversion) -> set[str]:
    return {item.split("=", 1)[0] for item in conversion.dropped}


def test_the_newest_fsdp_file_converts_as_b178a3cds_does():
    old = convert_verl(FIXTURES / "_generated_ppo_trainer.yaml")
    new = convert_verl(NEWEST_FSDP)
    assert dropped_keys(old) == dropped_keys(new) == REFUSED_AT_BOTH
    assert_same_but_the_worker(old.tree, new.tree)


def test_the_newest_megatron_file_converts_as_b178a3cds_does(tmp_path: Path):
    old_file = tmp_path / "_generated_ppo_megatron_trainer.yaml"
    old_file.write_text(yaml.safe_dump(verls_megatron_file(), sort_keys=False))
    old = convert_verl(old_file)
    new = convert_verl(NEWEST_MEGATRON)
    # verl's default use_megatron_fsdp=False (Megatron's own data parallel), new since
    # b178a3cd, trains the same updates: a note, not a key dropped
    assert dropped_keys(new) == dropped_keys(old)
    assert_same_but_the_worker(old.tree, new.tree)


def assert_same_but_the_worker(old: dict, new: dict) -> None:
    """b178a3cd's `trainer.use_legacy_worker_impl: auto` ran verl's legacy actor, which
    averages each micro-batch's own loss; 1dda039 has only the engine workers, mfsdp's
    default (`global`): the one key that differs."""
    assert old["actor"].pop("loss_normalization") == "micro_batch"
    assert "loss_normalization" not in new["actor"]
    assert new == old


def converted(tmp_path: Path, *keys: str):
    script = tmp_path / "run.sh"
    lines = ["python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo", *keys]
    script.write_text(" \\\n    ".join(lines) + "\n")
    return convert_verl(script)


def test_renamed_reward_keys_read_as_their_old_names(tmp_path: Path):
    new = converted(
        tmp_path,
        "reward.reward_manager.name=naive",
        "reward.reward_manager.source=register",
        "reward.reward_model.enable=False",
        "reward.reward_model.model_path=null",
        "reward.num_workers=4",
    )
    assert new.dropped == []
    refused = converted(tmp_path, "reward.reward_manager.name=dapo")
    legacy = converted(tmp_path, "reward_manager.name=dapo")
    reason = [item.split(": ", 1)[1] for item in refused.dropped]
    assert reason == [item.split(": ", 1)[1] for item in legacy.dropped]
    assert "naive reward manager" in reason[0]


def test_new_keys_at_verls_defaults_carry_over(tmp_path: Path):
    """Each optimizer key under the actor's optimizer file that has it: optim/fsdp.yaml's
    zero_indexed_step on the FSDP actor, optim/megatron.yaml's on the Megatron one (verl's
    struct refuses either on the other's file)."""
    keys = (
        "trainer.use_v1=True",
        "trainer.v1.trainer_mode=sync",
        "trainer.v1.separate_async.parameter_sync_step=4",
        "actor_rollout_ref.actor.checkpoint.strict=True",
        "actor_rollout_ref.actor.qat.enable=False",
        "actor_rollout_ref.rollout.full_determinism=False",
        "data.gen_batch_size=null",
        "algorithm.filter_groups.enable=False",
    )
    fsdp = converted(tmp_path, *keys, "actor_rollout_ref.actor.optim.zero_indexed_step=True")
    assert fsdp.dropped == []
    megatron = converted(
        tmp_path,
        "--config-name=ppo_megatron_trainer",
        *keys,
        "actor_rollout_ref.actor.megatron.pad_to_length=False",
        "actor_rollout_ref.actor.megatron.pad_bshd_to_minibatch_max=True",
        "actor_rollout_ref.actor.megatron.dynamic_context_parallel=False",
        "actor_rollout_ref.actor.optim.use_precision_aware_optimizer=False",
        "actor_rollout_ref.actor.optim.exp_avg_dtype=fp32",
    )
    assert megatron.dropped == []


def test_new_keys_that_change_the_run_are_refused_by_name(tmp_path: Path):
    new = converted(
        tmp_path,
        "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.actor.qat.enable=True",
        "algorithm.filter_groups.enable=True",
        "actor_rollout_ref.actor.optim.exp_avg_dtype=bf16",
    )
    assert [item.split(": ", 1)[0] for item in new.dropped] == [
        "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.actor.qat.enable=True",
        "algorithm.filter_groups.enable=True",
        "actor_rollout_ref.actor.optim.exp_avg_dtype=bf16",
    ]
    assert not any("no such key" in item for item in new.dropped)


def test_model_engine_is_a_config_group_not_a_key(tmp_path: Path):
    new = converted(tmp_path, "model_engine=megatron")
    assert len(new.dropped) == 1
    assert "selects verl's model_engine file megatron" in new.dropped[0]
    assert converted(tmp_path, "model_engine=dp").dropped == []


def test_sft_on_verls_megatron_fsdp_engine_trains_with_megatron_fsdp(tmp_path: Path):
    script = tmp_path / "sft.sh"
    script.write_text(
        "torchrun --nproc_per_node=8 -m verl.trainer.sft_trainer \\\n"
        "    data.train_files=/tmp/x.parquet model.path=/tmp/model \\\n"
        "    engine=megatron optim=megatron \\\n"
        "    engine.use_megatron_fsdp=True engine.use_mbridge=True engine.vanilla_mbridge=False\n"
    )
    new = convert_verl(script)
    assert new.dropped == []
    assert new.tree["strategy"]["name"] == "megatron_fsdp"
