"""from-verl reads a value as verl gets it: Hydra's reading of a command-line value (empty
is the empty text, a `~` stops verl), OmegaConf's of a YAML config (`012` is 10), and SFT's
`engine.*` keys of verl's Megatron engine as the actor's `megatron.*` are read."""

import pytest
import yaml

from trainer.config_yaml import ExpansionBudget
from trainer.verl_import import convert_verl
from trainer.verl_source import VerlSourceError, parse_bounded

# every key of verl 1dda039's engine/megatron.yaml at its default
MEGATRON_ENGINE_DEFAULTS = """
param_offload: False
grad_offload: False
optimizer_offload: False
tensor_model_parallel_size: 1
expert_model_parallel_size: 1
expert_tensor_parallel_size: null
pipeline_model_parallel_size: 1
virtual_pipeline_model_parallel_size: null
context_parallel_size: 1
sequence_parallel: True
use_distributed_optimizer: True
use_dist_checkpointing: False
dist_checkpointing_path: null
dynamic_context_parallel: False
max_seqlen_per_dp_cp_rank: null
dist_checkpointing_prefix: ''
dist_ckpt_optim_fully_reshardable: False
distrib_optim_fully_reshardable_mem_efficient: False
entropy_from_logits_with_chunking: False
entropy_from_logits_chunk_size: 2048
seed: 42
override_ddp_config: {}
override_transformer_config:
  recompute_granularity: null
  recompute_modules: ["core_attn"]
  recompute_method: null
  recompute_num_layers: null
  attention_backend: flash
override_mcore_model_config: {}
use_mbridge: True
vanilla_mbridge: False
use_remove_padding: True
pad_bshd_to_minibatch_max: True
pad_to_length: false
pad_to_length_bucket: 512
use_megatron_fsdp: False
forward_only: False
dtype: bfloat16
router_replay:
  mode: disabled
  record_file: null
  replay_file: null
qat:
  enable: false
  mode: "w4a16"
  group_size: 16
  ignore_patterns: ["lm_head", "*mlp.gate"]
  activation_observer: null
  quantization_config_path: null
"""


def _overrides(prefix, tree):
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _overrides(f"{prefix}{key}.", value)
        else:
            text = yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()
            yield f'"{prefix}{key}={text}"'


def test_every_megatron_engine_key_of_sft_at_its_default_is_known(tmp_path):
    script = tmp_path / "sft.sh"
    overrides = " ".join(_overrides("engine.", yaml.safe_load(MEGATRON_ENGINE_DEFAULTS)))
    script.write_text(
        "torchrun -m verl.trainer.sft_trainer model.path=/m/x data.train_files=/d/t.parquet"
        f" engine=megatron optim=megatron {overrides}\n"
    )
    conversion = convert_verl(script)
    assert [item for item in conversion.dropped if "no such key" in item] == []


def test_a_megatron_engine_switch_of_sft_is_refused_when_on(tmp_path):
    script = tmp_path / "sft.sh"
    script.write_text(
        "torchrun -m verl.trainer.sft_trainer model.path=/m/x data.train_files=/d/t.parquet"
        " engine=megatron engine.param_offload=True\n"
    )
    dropped = convert_verl(script).dropped
    assert any(item.startswith("engine.param_offload=True") for item in dropped)


@pytest.mark.parametrize(("written", "verl_gets"), [("012", 10), ("1:30", 90), ("007", 7)])
def test_a_verl_yaml_number_is_what_omegaconf_reads(tmp_path, written, verl_gets):
    source = tmp_path / "run.yaml"
    source.write_text(
        "algorithm: {adv_estimator: grpo}\nactor_rollout_ref: {model: {path: /m/x}}\n"
        f"trainer: {{total_epochs: {written}}}\n"
    )
    assert convert_verl(source).tree["trainer"]["epochs"] == verl_gets


@pytest.mark.parametrize("written", ["~", "~/ckpt", "[a,~]"])
def test_a_character_hydra_refuses_unquoted_stops_the_conversion(tmp_path, written):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        f" 'trainer.experiment_name={written}'\n"
    )
    with pytest.raises(VerlSourceError, match="token recognition error"):
        convert_verl(script)


def test_a_quoted_tilde_is_its_text(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        " \"trainer.experiment_name='~'\"\n"
    )
    assert convert_verl(script).tree["trainer"]["experiment_name"] == "~"


@pytest.mark.parametrize("written", ["", "   "])
def test_an_empty_override_value_is_the_empty_text_as_hydra_reads_it(written):
    budget = ExpansionBudget(max_chars=1 << 20)
    assert parse_bounded(written, "run.sh: trainer.experiment_name", budget) == ""


def test_a_key_a_template_leaves_empty_is_not_carried_over(tmp_path):
    """verl's templates leave paths for the user (`TRAIN_DATA_PATH=""`): verl gets the empty
    text and fails on it. The key is named not carried over; it was read as null, and the
    mfsdp default stayed. An empty experiment name is a name verl uses."""
    script = tmp_path / "run.sh"
    script.write_text(
        'TRAIN_DATA_PATH=""\n'
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        " actor_rollout_ref.model.path=/m data.train_files=$TRAIN_DATA_PATH"
        " trainer.total_epochs= trainer.experiment_name=\n"
    )
    conversion = convert_verl(script)
    assert "train_files" not in conversion.tree.get("data", {})
    assert "epochs" not in conversion.tree["trainer"]
    assert conversion.tree["trainer"]["experiment_name"] == ""
    dropped = [line.split("=")[0] for line in conversion.dropped if "the empty text" in line]
    assert dropped == ["data.train_files", "trainer.epochs"], conversion.dropped
