"""verl's whole resolved config (what verl prints when it starts, kept as a run's YAML; its
_generated_ppo_trainer.yaml has the same shape) converts to a useful mfsdp config: the
critic's, reward model's and profiler's sections, settings of speed and logging and keys at
verl's defaults are accepted with notes (trainer/verl_inert_keys.py, verl_off_keys.py), and
only keys whose value means something mfsdp does not do are listed. `from-verl` on verl's
generated file exited 2 on its `adv_estimator: gae`, and `train grpo --config` stopped at
`fsdp_config.reshard_after_forward` with "162 more key(s)"."""

from __future__ import annotations

import pytest
import yaml

from tests.support.paths import REPO
from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

GENERATED = REPO / "tests" / "fixtures" / "verl_configs" / "_generated_ppo_trainer.yaml"
ESTIMATOR = (
    "algorithm.adv_estimator=gae: mfsdp trains GRPO only; set algorithm.adv_estimator=grpo"
    " (verl's default, gae, is PPO with a critic)"
)


def as_grpo_run(tmp_path, **changes: str):
    """verl's generated config with the lines of `changes` (`old=new`) changed, as a file."""
    text = GENERATED.read_text()
    for old, new in changes.items():
        assert old.replace("__", " ") in text
        text = text.replace(old.replace("__", " "), new)
    path = tmp_path / "dump.yaml"
    path.write_text(text)
    return path


def test_verls_generated_config_lists_only_what_has_meaning_here():
    conversion = convert_verl(GENERATED)
    assert conversion.dropped == [
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2: mfsdp shards data-parallel"
        " only (FSDP): model parallel sizes are 1",
        ESTIMATOR,
    ]
    assert conversion.incomplete == []


def test_verls_generated_config_as_a_grpo_run_converts_and_loads_whole(tmp_path):
    path = as_grpo_run(
        tmp_path,
        **{
            "adv_estimator:__gae": "adv_estimator: grpo",
            "tensor_model_parallel_size:__2": "tensor_model_parallel_size: 1",
        },
    )
    conversion = convert_verl(path)
    assert (conversion.dropped, conversion.incomplete) == ([], [])
    written = tmp_path / "grpo.yaml"
    written.write_text(conversion.to_yaml(str(path)))
    cfg = load_config(GRPOConfig, written)
    assert cfg == load_config(GRPOConfig, path)  # `train grpo --config` reads the dump alike
    assert (cfg.data.max_prompt_length, cfg.rollout.max_response_length) == (512, 512)
    assert (cfg.actor.ppo_mini_batch_size, cfg.rollout.n, cfg.rollout.dtype) == (256, 1, "bf16")
    assert cfg.trainer.run_dir == "checkpoints/verl_examples/gsm8k"  # ${...} filled in
    assert any("fsdp_config.reshard_after_forward is ignored" in n for n in conversion.notes)
    assert any("critic.ppo_epochs is ignored: there is no critic" in n for n in conversion.notes)


def test_train_says_first_that_mfsdp_trains_grpo(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(GRPOConfig, GENERATED)
    assert str(caught.value).startswith(f"{GENERATED}: {ESTIMATOR}; 1 more key(s)")


def test_a_printed_config_copies_the_actors_values_into_the_critic(tmp_path):
    """verl resolves `critic.ppo_epochs: ${oc.select:actor_rollout_ref.actor.ppo_epochs,1}`
    before printing: a run's values, not defaults, in a section GRPO never reads."""
    dump = yaml.safe_load(GENERATED.read_text())
    dump["algorithm"]["adv_estimator"] = "grpo"
    dump["actor_rollout_ref"]["rollout"]["tensor_model_parallel_size"] = 1
    dump["actor_rollout_ref"]["actor"].update(ppo_epochs=2, rollout_n=8)
    dump["actor_rollout_ref"]["rollout"].update(n=8, prompt_length=512, response_length=1024)
    dump["data"]["max_response_length"] = 1024
    dump["critic"].update(ppo_epochs=2, ppo_mini_batch_size=64, rollout_n=8)
    path = tmp_path / "printed.yaml"
    path.write_text(yaml.safe_dump(dump))
    conversion = convert_verl(path)
    assert (conversion.dropped, conversion.incomplete) == ([], [])
    cfg = load_config(GRPOConfig, path)
    assert (cfg.actor.ppo_epochs, cfg.rollout.n, cfg.rollout.max_response_length) == (2, 8, 1024)


@pytest.mark.parametrize(
    "old, new, why",
    [
        ("loss_mode:__vanilla", "loss_mode: clip-cov", "PPO's clipped loss"),
        ("ignore_eos:__false", "ignore_eos: true", "end-of-sequence token"),
        ("reward_manager:__naive", "reward_manager: dapo", "naive reward manager"),
        ("over_sample_rate:__0", "over_sample_rate: 0.1", "generated to its end"),
        ("use_pf_ppo:__false", "use_pf_ppo: true", "PF-PPO"),
        ("rollout_is:__null", "rollout_is: token", "rollout correction"),
        ("fsdp_size:__-1", "fsdp_size: 4", "sharded over all ranks"),
        ("response_length:__${oc", "response_length: 64 #", "they are one setting here"),
    ],
)
def test_a_value_that_changes_training_is_listed(tmp_path, old, new, why):
    path = as_grpo_run(
        tmp_path,
        **{
            "adv_estimator:__gae": "adv_estimator: grpo",
            "tensor_model_parallel_size:__2": "tensor_model_parallel_size: 1",
            old: new,
        },
    )
    dropped = convert_verl(path).dropped
    assert len(dropped) >= 1 and all(why in item for item in dropped), dropped
    with pytest.raises(ConfigError, match=why):
        load_config(GRPOConfig, path)


def test_verls_missing_value_and_no_limit_read_as_not_set(tmp_path):
    """`name: ???` (OmegaConf's "must be given") and the YAML's `val_max_samples: -1` (verl's
    "every row", loaded as a native key it failed "must be > 0")."""
    path = tmp_path / "run.yaml"
    path.write_text(
        "algorithm:\n  adv_estimator: grpo\nactor_rollout_ref:\n  rollout:\n    name: ???\n"
        "    n: 4\ndata:\n  val_max_samples: -1\n"
    )
    cfg = load_config(GRPOConfig, path)
    assert (cfg.rollout.name, cfg.data.val_max_samples, cfg.rollout.n) == ("auto", None, 4)
    assert convert_verl(path).dropped == []
