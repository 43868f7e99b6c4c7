"""verl's Megatron LoRA defaults, read as verl's Megatron workers read them
(verl/workers/config/megatron_peft.py): a run that turns LoRA on (lora.rank above 0) and
leaves out lora.type or lora_A_init_method trains Megatron's fused `lora` with a xavier A,
which mfsdp does not, so each is listed as not carried over as the same value given is; its
alpha 32 is written. They converted at exit 0 as if canonical. SFT on verl's Megatron engine
names the same settings `model.lora.*`, which had no rules at all.
"""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.verl_import import convert_verl

GRPO_LORA = "actor_rollout_ref.model.lora."
SFT_LORA = "model.lora."
ADAPTERS = "adapters here are one per Hugging Face module (canonical_lora)"
A_INIT = "LoRA's A is initialised as PEFT does (kaiming uniform) here"


def grpo_script(tmp_path, *keys: str):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer"
        f" algorithm.adv_estimator=grpo {' '.join(keys)}\n"
    )
    return convert_verl(script)


def sft_script(tmp_path, *keys: str):
    script = tmp_path / "run.sh"
    script.write_text(f"torchrun -m verl.trainer.sft_trainer {' '.join(keys)}\n")
    return convert_verl(script)


def listed_unset(dropped: list[str], key: str, default: str, why: str, here: str) -> bool:
    """Whether `dropped` lists verl's `default` for `key` with the reason `why` (the explicit
    value's) and the value that trains as here."""
    start = f"{key}: not set, so verl trains its default, {default}: {why}"
    end = f"; set {key}={here} in verl for the same training"
    return any(item.startswith(start) and item.endswith(end) for item in dropped)


def test_lora_on_without_type_or_a_init_lists_verls_defaults_as_not_carried(tmp_path):
    conversion = grpo_script(tmp_path, f"{GRPO_LORA}rank=16")
    assert conversion.tree["model"]["lora_rank"] == 16
    dropped = conversion.dropped
    assert listed_unset(dropped, f"{GRPO_LORA}type", "lora", ADAPTERS, "canonical_lora")
    assert listed_unset(dropped, f"{GRPO_LORA}lora_A_init_method", "xavier", A_INIT, "kaiming")
    assert len(dropped) == 2, dropped


def test_lora_on_without_alpha_trains_verls_alpha(tmp_path):
    conversion = grpo_script(
        tmp_path,
        f"{GRPO_LORA}rank=16",
        f"{GRPO_LORA}type=canonical_lora",
        f"{GRPO_LORA}lora_A_init_method=kaiming",
    )
    assert conversion.dropped == []
    assert conversion.tree["model"]["lora_alpha"] == 32
    assert any(
        note.startswith(f"model.lora_alpha=32: verl's default ({GRPO_LORA}alpha)")
        for note in conversion.notes
    ), conversion.notes


def test_lora_given_as_here_carries_over_with_no_default_written(tmp_path):
    conversion = grpo_script(
        tmp_path,
        f"{GRPO_LORA}rank=16",
        f"{GRPO_LORA}alpha=8",
        f"{GRPO_LORA}type=canonical_lora",
        f"{GRPO_LORA}lora_A_init_method=kaiming",
    )
    assert conversion.dropped == []
    assert (conversion.tree["model"]["lora_rank"], conversion.tree["model"]["lora_alpha"]) == (
        16,
        8,
    )


@pytest.mark.parametrize("rank", [(), (f"{GRPO_LORA}rank=0",)])
def test_lora_off_reads_no_lora_default(tmp_path, rank):
    conversion = grpo_script(tmp_path, *rank)
    assert conversion.dropped == []
    assert "lora_alpha" not in conversion.tree.get("model", {})


def test_the_megatron_lora_fixture_names_its_fused_lora(tmp_path):
    """verl's own example sets lora_A_init_method=kaiming and leaves lora.type to verl."""
    from tests.trainer.test_verl_launch_scripts import SCRIPTS

    conversion = convert_verl(SCRIPTS / "run_qwen2-7b_math_megatron_lora.sh")
    entries = [item for item in conversion.dropped if item.startswith(GRPO_LORA)]
    assert len(entries) == 1, entries
    assert listed_unset(entries, f"{GRPO_LORA}type", "lora", ADAPTERS, "canonical_lora")


def test_sft_on_megatron_reads_model_lora_keys(tmp_path):
    conversion = sft_script(tmp_path, f"+{SFT_LORA}rank=8", f"+{SFT_LORA}target_modules=linear_qkv")
    model = conversion.tree["model"]
    assert (model["lora_rank"], model["lora_alpha"]) == (8, 32)
    assert model["target_modules"] == ["q_proj", "k_proj", "v_proj"]
    dropped = conversion.dropped
    assert listed_unset(dropped, f"{SFT_LORA}type", "lora", ADAPTERS, "canonical_lora")
    assert listed_unset(dropped, f"{SFT_LORA}lora_A_init_method", "xavier", A_INIT, "kaiming")


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        ("type=lora", "adapters here are one per Hugging Face module"),
        ("dropout=0.05", "LoRA dropout here is 0"),
        ("adapter_path=/ckpt/adapter", "model.lora_adapter_path takes a PEFT adapter dir"),
    ],
)
def test_sft_model_lora_settings_that_change_training_are_refused(setting, why):
    with pytest.raises(ConfigError, match=why) as err:
        load_config(SFTConfig, None, [f"{SFT_LORA}rank=8", SFT_LORA + setting])
    assert f"{SFT_LORA}{setting.split('=')[0]}" in str(err.value)


def test_sft_model_lora_settings_read_as_grpos(caplog):
    with caplog.at_level("WARNING", logger="mfsdp.config"):
        cfg = load_config(
            SFTConfig,
            None,
            [f"{SFT_LORA}rank=8", f"{SFT_LORA}merge=true", f"{SFT_LORA}dropout=0.0"],
        )
    assert cfg.model.lora_rank == 8
    assert f"{SFT_LORA}merge is ignored" in caplog.text
    assert f"{SFT_LORA}dropout is ignored" in caplog.text
