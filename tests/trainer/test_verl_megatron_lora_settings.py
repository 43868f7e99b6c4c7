"""verl's Megatron LoRA settings beyond rank, alpha and target_modules, read as verl's
Megatron workers read them (verl/workers/config/megatron_peft.py): only at a lora.rank
above 0, and then each carried, ignored with a note where it changes no update here, or
refused naming the key where it would. They were refused as keys mfsdp does not map, and
so was a bare `lora.merge=false` with LoRA off, which verl runs as it is.
"""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

LORA = "actor_rollout_ref.model.lora."
ON = (f"{LORA}rank=16", f"{LORA}alpha=32", f"{LORA}type=canonical_lora")


def grpo(*overrides: str) -> GRPOConfig:
    return load_config(GRPOConfig, None, ["algorithm.adv_estimator=grpo", *overrides])


@pytest.mark.parametrize(
    "setting",
    [
        "merge=true",
        "merge=false",
        "dropout=0.0",
        "dropout_position=post",
        "lora_B_init_method=zero",
        "exclude_modules=[]",
        "a2a_experimental=true",
        "freeze_vision_model=false",
        "freeze_vision_projection=false",
        "freeze_language_model=false",
    ],
)
def test_settings_that_train_as_here_pass_with_lora_on(setting, caplog):
    with caplog.at_level("WARNING", logger="mfsdp.config"):
        cfg = grpo(*ON, LORA + setting)
    assert cfg.model.lora_rank == 16
    assert f"{LORA}{setting.split('=')[0]} is ignored" in caplog.text


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        ("dropout=0.05", "LoRA dropout here is 0"),
        ("lora_B_init_method=xavier", "B starts at zero"),
        ("exclude_modules=[linear_fc2]", "excluding modules is not supported"),
        ("dtype=float32", "the adapter's dtype here follows the model's"),
        ("adapter_path=/ckpt/adapter", "model.lora_adapter_path takes a PEFT adapter dir"),
    ],
)
def test_settings_that_change_training_are_refused_naming_the_key(setting, why):
    with pytest.raises(ConfigError, match=why) as err:
        grpo(*ON, LORA + setting)
    assert f"{LORA}{setting.split('=')[0]}" in str(err.value)


@pytest.mark.parametrize(
    "settings",
    [
        ("merge=false",),
        ("dropout=0.1", "type=lora", 'target_modules=["*.layers.0.*.linear_qkv"]'),
        ("rank=0", "adapter_path=/ckpt/adapter", "dtype=float32"),
    ],
)
def test_settings_with_lora_off_are_ignored(settings, tmp_path):
    """verl's Megatron LoRA is off at lora.rank 0, its default: no other lora.* key is read."""
    script = tmp_path / "run.sh"
    keys = " ".join(f"'{LORA}{setting}'" for setting in settings)
    script.write_text(
        "python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer"
        f" algorithm.adv_estimator=grpo {keys}\n"
    )
    conversion = convert_verl(script)
    assert conversion.dropped == []
    assert conversion.tree.get("model", {}).get("lora_rank", 0) == 0
    ignored = f"{LORA}{settings[-1].split('=')[0]} is ignored: LoRA is off"
    assert any(ignored in note for note in conversion.notes), conversion.notes
