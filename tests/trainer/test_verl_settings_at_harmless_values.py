"""verl settings mfsdp has no switch for are accepted at the values that leave them off, or do
what mfsdp does, with a note, and refused at any other with the reason (trainer/
verl_off_keys.py); a null is verl's "not set". verl's own scripts and default configs
failed on them: `actor_rollout_ref.actor.fsdp_config.param_offload=False` and
`data.truncation=error` in nearly every GRPO script, `warmup_style: null` in
_generated_ppo_trainer.yaml, 23 keys of sft_trainer.yaml. The YAML excerpts below are lines
of verl's own files (github.com/volcengine/verl, verl/trainer/config)."""

from __future__ import annotations

import logging

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

# verl/trainer/config/_generated_ppo_trainer.yaml, its first lines
GENERATED_PPO = """\
actor_rollout_ref:
  actor:
    optim:
      _target_: verl.workers.config.FSDPOptimizerConfig
      optimizer: AdamW
      optimizer_impl: torch.optim
      lr: 1.0e-06
      lr_warmup_steps_ratio: 0.0
      total_training_steps: -1
      weight_decay: 0.01
      lr_warmup_steps: -1
      betas:
      - 0.9
      - 0.999
      clip_grad: 1.0
      min_lr_ratio: 0.0
      num_cycles: 0.5
      lr_scheduler_type: constant
      warmup_style: null
      override_optimizer_config: null
    fsdp_config:
      _target_: verl.workers.config.FSDPEngineConfig
      wrap_policy:
        min_num_params: 0
      param_offload: false
      optimizer_offload: false
      offload_policy: false
"""

# verl/trainer/config/sft_trainer.yaml (verl's FSDP SFT trainer), the keys at no-op defaults
SFT_TRAINER = """\
defaults:
  - optim: fsdp
  - _self_

data:
  train_batch_size: 256
  micro_batch_size: null # will be deprecated, use micro_batch_size_per_gpu
  micro_batch_size_per_gpu: 4  # this is also val batch size
  train_max_samples: -1  # set to -1 to use full dataset
  val_max_samples: -1  # set to -1 to use full dataset
  multiturn:
    enable: false  # Set to true to use multi-turn dataset
    messages_key: messages  # Key for messages list in multi-turn mode
    tools_key: tools  # Key for tools list in multi-turn mode
    enable_thinking_key: enable_thinking  # Whether to enable thinking in multi-turn mode
  max_length: 1024
  truncation: error
  balance_dp_token: False
  chat_template: null
  custom_cls:
    path: null
    name: null
  use_shm: False
  apply_chat_template_kwargs: {}
model:
  use_shm: False
  fsdp_config:
    model_dtype: fp32
    wrap_policy:
      min_num_params: 0
    cpu_offload: False
    offload_params: False
  external_lib: null
  trust_remote_code: False
  use_liger: False
  strategy: fsdp2
trainer:
  default_local_dir: checkpoints/${trainer.project_name}/${trainer.experiment_name}
  project_name: gsm8k-sft
  experiment_name: test
  checkpoint:
    save_contents: ["model", "optimizer", "extra"]
    load_contents: ${trainer.checkpoint.save_contents}
"""

# verl's examples/grpo_trainer/run_qwen2-7b.sh, the keys that failed it (and what is left)
GRPO_SCRIPT = """\
python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.truncation='error' \\
    actor_rollout_ref.actor.fsdp_config.param_offload=False \\
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \\
    actor_rollout_ref.ref.fsdp_config.param_offload=True \\
    actor_rollout_ref.rollout.load_format=safetensors \\
    actor_rollout_ref.rollout.layered_summon=True \\
    trainer.total_epochs=15 $@
"""

ROLES = ["actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.actor.megatron"]
REFERENCE = ["actor_rollout_ref.ref.fsdp_config", "actor_rollout_ref.ref.megatron"]


def grpo(*overrides: str) -> GRPOConfig:
    return load_config(GRPOConfig, None, list(overrides))


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", ["param_offload", "optimizer_offload"])
def test_offload_off_is_ignored_and_on_is_refused(role, name, caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        assert grpo(f"{role}.{name}=False") == grpo(f"{role}.{name}=null") == GRPOConfig()
    assert f"note: verl's {role}.{name} is ignored: no offload" in caplog.messages
    with pytest.raises(ConfigError, match="CPU offload is not supported yet"):
        grpo(f"{role}.{name}=True")


@pytest.mark.parametrize("role", REFERENCE)
@pytest.mark.parametrize("name", ["param_offload", "optimizer_offload", "grad_offload"])
@pytest.mark.parametrize("value", ["True", "False"])
def test_the_reference_models_offload_is_ignored_at_any_value(role, name, value, caplog):
    """verl moves the frozen reference to the CPU between its uses: the same log-probs.
    Refused at True, 71 of verl's 158 example scripts stopped on it."""
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        assert grpo(f"{role}.{name}={value}") == GRPOConfig()
    assert caplog.messages == [
        f"note: verl's {role}.{name} is ignored: the reference model's CPU offload between its"
        " uses: memory only, the same log-probs (the reference here stays on the device,"
        " sharded like the actor)"
    ]


def test_fsdp_offload_policy_and_the_critics_offload(caplog):
    """The critic's settings change nothing in GRPO (verl builds no critic for it), at any
    value: trainer/verl_inert_keys.py; `critic.enable=true` is what is refused."""
    assert grpo("actor_rollout_ref.actor.fsdp_config.offload_policy=False") == GRPOConfig()
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        assert grpo("critic.model.fsdp_config.param_offload=True") == GRPOConfig()
    assert any("param_offload is ignored: there is no critic in GRPO" in m for m in caplog.messages)
    with pytest.raises(ConfigError, match="there is no critic in GRPO"):
        grpo("critic.enable=True")


def test_a_flag_is_no_number():
    """`False == 0` in Python: a 0 is not verl's False, nor False its size 0."""
    with pytest.raises(ConfigError, match="sharded units here are decoder layers"):
        grpo("actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params=false")


def test_truncation_error_is_what_grpo_does_to_long_prompts(caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        assert grpo("data.truncation=error") == GRPOConfig()
    assert any("data.truncation is ignored" in note for note in caplog.messages)
    for side in ("left", "right", "middle"):
        with pytest.raises(ConfigError, match="prompts are never cut here"):
            grpo(f"data.truncation={side}")


def test_verls_no_limit_is_mfsdps_null():
    assert grpo("data.val_max_samples=-1").data.val_max_samples is None
    assert load_config(SFTConfig, None, ["data.val_max_samples=-1"]) == SFTConfig()


def test_use_liger_is_model_liger(caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        assert grpo("actor_rollout_ref.model.use_liger=True").model.liger is True
        assert load_config(SFTConfig, None, ["model.use_liger=True"]).model.liger is True
    assert "note: verl's model.use_liger is model.liger=True here" in caplog.messages


def test_verls_generated_ppo_config_trips_on_no_default(tmp_path, caplog):
    """`warmup_style: null` was refused as "optim.scheduler here is constant, cosine or
    linear"; `_target_` (the class verl builds) as a key mfsdp does not map."""
    config = tmp_path / "_generated_ppo_trainer.yaml"
    config.write_text(GENERATED_PPO)
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = load_config(GRPOConfig, config)
    assert (cfg.optim.lr, cfg.optim.scheduler, cfg.optim.betas) == (1e-6, "constant", [0.9, 0.999])
    assert (
        "note: verl's actor_rollout_ref.actor.optim.warmup_style is ignored: null, verl's"
        " 'not set'" in caplog.messages
    )


def test_keys_that_do_not_carry_name_from_verl(tmp_path):
    """The loader stops at the first; `mfsdp config from-verl` lists them all."""
    config = tmp_path / "ppo.yaml"
    config.write_text(GENERATED_PPO + "      fsdp_size: 4\n      full_determinism: true\n")
    with pytest.raises(ConfigError) as caught:
        load_config(GRPOConfig, config)
    message = str(caught.value)
    assert message.startswith(
        f"{config}: verl key 'actor_rollout_ref.actor.fsdp_config.fsdp_size=4'"
    )
    assert message.endswith(
        f"; 1 more key(s) of the file do not carry over either: `mfsdp config from-verl {config}`"
        " lists them all"
    )


def test_verls_sft_config_converts_whole(tmp_path):
    config = tmp_path / "sft_trainer.yaml"
    config.write_text(SFT_TRAINER)
    conversion = convert_verl(config)
    assert (conversion.command, conversion.dropped, conversion.incomplete) == ("sft", [], [])
    assert conversion.tree["trainer"]["run_dir"] == "checkpoints/gsm8k-sft/test"
    assert conversion.tree["model"]["liger"] is False
    assert "verl's model.fsdp_config.cpu_offload is ignored: no offload" in conversion.notes


def test_a_hydra_defaults_list_points_to_from_verl(tmp_path):
    config = tmp_path / "sft_trainer.yaml"
    config.write_text(SFT_TRAINER)
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, config)
    message = str(caught.value)
    assert message.startswith(f"{config}: `defaults:` is Hydra's list")
    assert f"mfsdp config from-verl {config} > config.yaml" in message


def test_verls_grpo_script_leaves_only_what_has_no_equivalent(tmp_path):
    script = tmp_path / "run_qwen2-7b.sh"
    script.write_text(GRPO_SCRIPT)
    conversion = convert_verl(script)
    assert [item.split(":")[0] for item in conversion.dropped] == [
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    ]
    # the reference model's offload is memory only (verl's examples set it True)
    assert any(
        note.startswith("verl's actor_rollout_ref.ref.fsdp_config.param_offload is ignored")
        for note in conversion.notes
    ), conversion.notes
