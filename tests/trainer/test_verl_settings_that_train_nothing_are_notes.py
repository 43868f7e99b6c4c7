"""verl settings that do not change what is trained are notes, not keys left out (exit 1):
Megatron's kernel fusions and MoE dispatch in `override_transformer_config`, Hydra's own
settings, what a checkpoint holds (`save_contents`), and `optim.min_lr_ratio` beside the
run's `optim.lr` (the floor of verl's cosine schedule, `optim.min_lr` here).

Was: each listed as NOT carried over, so verl's own Megatron-FSDP GRPO script, its SFT
commands and the `hydra: searchpath:` header of user configs exited 1 on them alone, and
the fusions were told to "edit config.json", which has no field for them.
"""

from __future__ import annotations

import logging

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

GRPO = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_files=/d"
SFT = "torchrun --nproc_per_node=2 -m verl.trainer.sft_trainer data.train_files=/d model.path=/m"
OVERRIDES = "actor_rollout_ref.{role}.megatron.override_transformer_config"


def _converted(tmp_path, line: str):
    script = tmp_path / "run.sh"
    script.write_text(line + "\n")
    return convert_verl(script)


@pytest.mark.parametrize(
    "name, value",
    [
        ("gradient_accumulation_fusion", "False"),
        ("apply_rope_fusion", "True"),
        ("bias_activation_fusion", "True"),
        ("masked_softmax_fusion", "True"),
        ("bias_dropout_fusion", "True"),
        ("persist_layer_norm", "True"),
        ("moe_permute_fusion", "True"),
        ("moe_grouped_gemm", "True"),
        ("moe_token_dispatcher_type", "alltoall"),
        ("moe_enable_deepep", "True"),
    ],
)
def test_kernel_fusions_and_dispatch_are_notes(tmp_path, name, value):
    keys = " ".join(f"++{OVERRIDES.format(role=role)}.{name}={value}" for role in ("actor", "ref"))
    conversion = _converted(tmp_path, f"{GRPO} {keys}")
    assert not conversion.dropped, conversion.dropped
    assert any(
        "override_transformer_config is ignored: recomputation, fused kernels" in note
        for note in conversion.notes
    ), conversion.notes
    sft = _converted(tmp_path, f"{SFT} +engine.override_transformer_config.{name}={value}")
    assert not sft.dropped, sft.dropped


def test_a_model_override_is_refused_naming_it(tmp_path):
    given = f"+{OVERRIDES.format(role='actor')}"
    conversion = _converted(
        tmp_path, f"{GRPO} {given}.moe_router_dtype=fp32 {given}.apply_rope_fusion=True"
    )
    [dropped] = conversion.dropped
    assert dropped.startswith(f"{given}.moe_router_dtype=fp32: moe_router_dtype changes what")
    assert "apply_rope_fusion" not in dropped


def test_hydras_own_settings_are_notes(tmp_path):
    keys = "hydra.run.dir=/tmp/o hydra/job_logging=disabled hydra.job.chdir=False"
    conversion = _converted(tmp_path, f"{GRPO} {keys}")
    assert not conversion.dropped, conversion.dropped
    for key in ("hydra.run.dir", "hydra/job_logging", "hydra.job.chdir"):
        assert f"verl's {key} is ignored: Hydra's own settings" in "\n".join(conversion.notes)
    config = tmp_path / "mine.yaml"
    config.write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\ndefaults:\n  - ppo_trainer\n"
        "  - _self_\nalgorithm:\n  adv_estimator: grpo\n"
    )
    assert not convert_verl(config).dropped


@pytest.mark.parametrize(
    "line",
    [
        f"{GRPO} actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        f"{SFT} 'checkpoint.save_contents=[model]'",
    ],
)
def test_what_verl_saves_is_a_note(tmp_path, line):
    conversion = _converted(tmp_path, line)
    assert not conversion.dropped, conversion.dropped
    assert any("save_contents is ignored: what verl writes" in n for n in conversion.notes)


def test_what_verl_loads_on_a_resume_is_still_refused_but_all_three():
    with pytest.raises(ConfigError, match="a resume loads all three"):
        load_config(SFTConfig, None, ["checkpoint.load_contents=[model]"])


def test_min_lr_ratio_beside_the_runs_lr_is_min_lr(tmp_path, caplog):
    conversion = _converted(
        tmp_path, f"{SFT} optim.lr=1e-5 optim.lr_scheduler_type=cosine optim.min_lr_ratio=0.1"
    )
    assert not conversion.dropped, conversion.dropped
    assert conversion.tree["optim"]["min_lr"] == 1e-6  # not 1.0000000000000002e-06
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = load_config(
            GRPOConfig,
            None,
            [
                "actor_rollout_ref.actor.optim.lr=2e-6",
                "actor_rollout_ref.actor.optim.min_lr_ratio=0.5",
            ],
        )
    assert (cfg.optim.lr, cfg.optim.min_lr) == (2e-6, 1e-6)
    assert any("optim.min_lr=1e-06 here: min_lr_ratio x optim.lr" in m for m in caplog.messages)


def test_min_lr_ratio_without_the_runs_lr_is_left_to_set(tmp_path):
    conversion = _converted(tmp_path, f"{GRPO} actor_rollout_ref.actor.optim.min_lr_ratio=0.1")
    assert conversion.dropped == [
        "actor_rollout_ref.actor.optim.min_lr_ratio=0.1: optim.min_lr here is absolute: set"
        " optim.min_lr to min_lr_ratio x lr"
    ]


def test_min_lr_ratio_on_megatron_is_not_read(tmp_path):
    conversion = _converted(
        tmp_path,
        f"{GRPO} actor_rollout_ref.actor.strategy=megatron actor_rollout_ref.actor.optim.lr=1e-6"
        " +actor_rollout_ref.actor.optim.min_lr_ratio=0.1",
    )
    assert "min_lr" not in conversion.tree.get("optim", {}), conversion.tree
    assert any("Megatron backend reads optim.min_lr, not this" in n for n in conversion.notes)
