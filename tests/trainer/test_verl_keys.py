"""verl's key names work as overrides and YAML (trainer/verl_keys.py), keys with no meaning
here fail in one line, and `mfsdp config from-verl` converts verl scripts and configs."""

import logging
import re

import pytest
import yaml

from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO
from trainer import verl_keys
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import VerlSourceError, convert_verl
from trainer.verl_rules import RULES

EXAMPLES = REPO / "examples" / "verl"


def grpo(*overrides: str) -> GRPOConfig:
    return load_config(GRPOConfig, None, list(overrides))


def sft(*overrides: str) -> SFTConfig:
    return load_config(SFTConfig, None, list(overrides))


def test_grpo_overrides_from_a_verl_script(caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = grpo(
            "actor_rollout_ref.actor.optim.lr=2e-6",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.actor.kl_loss_coef=0.01",
            "actor_rollout_ref.actor.clip_ratio_high=0.28",
            "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
            "actor_rollout_ref.rollout.n=3",
            "actor_rollout_ref.rollout.top_k=20",
            "data.max_response_length=64",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.model.enable_gradient_checkpointing=True",
            "+actor_rollout_ref.actor.megatron.use_megatron_fsdp=True",
            "trainer.save_freq=-1",
            "trainer.test_freq=5",
            "trainer.default_local_dir=/ckpt/run",
            "trainer.total_training_steps=7",
            "trainer.max_actor_ckpt_to_keep=2",
            "trainer.project_name=p",
            "trainer.logger=['console','wandb']",
        )
    assert (
        cfg.optim.lr == 2e-6
        and cfg.actor.ppo_mini_batch_size == 4
        and cfg.actor.ppo_micro_batch_size_per_gpu == 1
    )
    assert (cfg.actor.kl_loss_coef, cfg.actor.clip_ratio_high, cfg.actor.loss_agg_mode) == (
        0.01,
        0.28,
        "seq-mean-token-mean",
    )
    assert (cfg.rollout.n, cfg.rollout.top_k, cfg.rollout.max_response_length) == (3, 20, 64)
    assert cfg.actor.log_prob_micro_batch_size_per_gpu == 4 and cfg.model.activation_checkpointing
    assert cfg.strategy.name == "megatron_fsdp"
    assert (cfg.checkpoint.save_every, cfg.trainer.eval_every, cfg.trainer.run_dir) == (
        0,
        5,
        "/ckpt/run",
    )
    assert (cfg.trainer.total_steps, cfg.checkpoint.keep_last) == (7, 2)
    assert cfg.trainer.project_name == "p" and cfg.trainer.logger == ["console", "wandb"]
    notes = caplog.messages
    assert "note: verl's actor_rollout_ref.actor.optim.lr is optim.lr=2e-6 here" in notes
    assert "note: verl's trainer.save_freq is checkpoint.save_every=0 here" in notes
    assert not any("project_name" in note for note in notes)  # mfsdp's own name: nothing to note


def test_sft_keys_from_verls_sft_trainer():
    cfg = sft(
        "data.train_batch_size=64",
        "data.micro_batch_size_per_gpu=4",
        "data.use_dynamic_bsz=False",
        "data.max_token_len_per_gpu=8192",
        "optim.lr_warmup_steps_ratio=0.2",
        "optim.lr_decay_style=linear",
        "optim.lr_warmup_steps=-1",
        "trainer.total_epochs=3",
    )
    assert (cfg.data.global_batch_size, cfg.data.micro_batch_size, cfg.data.packing) == (
        64,
        4,
        False,
    )
    assert cfg.data.max_tokens_per_micro_batch == 8192
    assert (
        cfg.optim.warmup_ratio,
        cfg.optim.scheduler,
        cfg.optim.warmup_steps,
        cfg.trainer.epochs,
    ) == (0.2, "linear", 0, 3)


def test_a_single_logger_name_is_a_list_of_one():
    assert sft("trainer.logger=console").trainer.logger == ["console"]
    with pytest.raises(
        ConfigError, match=re.escape("expects one of console | jsonl | tensorboard")
    ):
        sft("trainer.logger=[console,mlflow]")


def test_the_same_name_means_each_commands_own_unit():
    """verl's data.train_batch_size counts prompts in GRPO (native here) and sequences in SFT."""
    assert grpo("data.train_batch_size=8").data.train_batch_size == 8
    assert sft("data.train_batch_size=8").data.global_batch_size == 8


@pytest.mark.parametrize(
    "resume, expected",
    [
        (["trainer.resume_mode=disable"], "disable"),
        (
            ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/r/global_step_4"],
            "/r/global_step_4",
        ),
        (
            ["trainer.resume_from_path=/r/global_step_4", "trainer.resume_mode=auto"],
            "/r/global_step_4",
        ),
    ],
)
def test_resume_mode_and_path_read_together(resume, expected):
    assert sft(*resume).checkpoint.resume == expected


@pytest.mark.parametrize(
    "override, why",
    [
        ("actor_rollout_ref.rollout.multi_turn.enable=True", "the rollout here is single-turn"),
        (
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            "model parallel sizes are 1",
        ),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size=4", "model parallel sizes are 1"),
        ("actor_rollout_ref.rollout.name=sglang", "sglang is not supported"),
        (
            "actor_rollout_ref.actor.megatron.use_megatron_fsdp=sometimes",
            "use_megatron_fsdp is True (strategy.name=megatron_fsdp) or False",
        ),
        ("trainer.resume_mode=resume_path", "needs trainer.resume_from_path"),
    ],
)
def test_keys_with_no_meaning_here_fail_in_one_line(override, why):
    with pytest.raises(ConfigError) as caught:
        grpo(override)
    message = str(caught.value)
    assert why in message and "\n" not in message


def test_harmless_values_of_such_keys_are_accepted():
    cfg = grpo(
        "actor_rollout_ref.rollout.mode=sync",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1",
        "actor_rollout_ref.model.lora_rank=0",
        "trainer.n_gpus_per_node=8",
        # verl's default: Megatron's own data parallel, the same updates as sharded
        "actor_rollout_ref.actor.megatron.use_megatron_fsdp=False",
    )
    assert cfg == GRPOConfig()


def test_lora_keys_map_to_the_model_section():
    cfg = load_config(
        GRPOConfig,
        None,
        [
            "actor_rollout_ref.model.lora_rank=8",
            "actor_rollout_ref.model.lora_alpha=32",
            "actor_rollout_ref.model.target_modules=[q_proj,v_proj]",
        ],
    )
    assert (cfg.model.lora_rank, cfg.model.lora_alpha, cfg.model.target_modules) == (
        8,
        32,
        ["q_proj", "v_proj"],
    )


def test_grpo_only_keys_are_unknown_in_sft():
    with pytest.raises(
        ConfigError,
        match=r"verl key 'actor_rollout_ref\.rollout\.n' is for mfsdp train grpo, not sft",
    ):
        sft("actor_rollout_ref.rollout.n=4")


def test_verl_keys_in_a_yaml_file(tmp_path):
    path = tmp_path / "grpo.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "actor_rollout_ref": {"actor": {"optim": {"lr": 3e-6}, "ppo_mini_batch_size": 8}},
                "trainer": {"save_freq": 10, "total_epochs": 2},
            }
        )
    )
    cfg = load_config(GRPOConfig, path, ["actor_rollout_ref.actor.ppo_mini_batch_size=4"])
    assert (
        cfg.optim.lr,
        cfg.actor.ppo_mini_batch_size,
        cfg.checkpoint.save_every,
        cfg.trainer.epochs,
    ) == (3e-6, 4, 10, 2)


def test_every_mapped_key_names_a_real_mfsdp_key():
    from trainer.verl_keys import is_native

    for verl_key, rule in RULES.items():
        if rule.target:
            classes = (
                [GRPOConfig]
                if rule.commands == ("grpo",)
                else [SFTConfig]
                if rule.commands == ("sft",)
                else [SFTConfig, GRPOConfig]
            )
            assert all(is_native(cls, rule.target) for cls in classes), verl_key


def test_from_verl_grpo_script_gives_a_config_that_loads(tmp_path, monkeypatch):
    monkeypatch.delenv("HOME", raising=False)  # set here, its value would be the path
    conversion = convert_verl(EXAMPLES / "run_grpo_megatron_fsdp.sh")
    assert conversion.command == "grpo" and not conversion.dropped
    path = tmp_path / "grpo.yaml"
    path.write_text(conversion.to_yaml("script"))
    cfg = load_config(GRPOConfig, path)
    assert (cfg.optim.lr, cfg.actor.ppo_mini_batch_size, cfg.rollout.n, cfg.strategy.name) == (
        1e-6,
        16,
        5,
        "megatron_fsdp",
    )
    assert cfg.model.path == "/models/Qwen2.5-Math-7B"  # ${MODEL_PATH:-...} from the script itself
    assert cfg.data.train_files == ["$HOME/data/gsm8k/train.parquet"]
    assert any("data.train_files" in note and "shell variable" in note for note in conversion.notes)


def test_from_verl_sft_script():
    """The example selects verl's Megatron engine and optimizer files with Megatron-FSDP on,
    so its optim.lr_decay_style and optim.min_lr are keys verl's config has."""
    script = EXAMPLES / "run_sft_megatron_fsdp.sh"
    assert {"engine=megatron", "optim=megatron", "engine.use_megatron_fsdp=True"} <= set(
        script.read_text().split()
    )
    conversion = convert_verl(script)
    assert conversion.command == "sft" and not conversion.dropped
    assert (
        conversion.tree["data"]["global_batch_size"] == 256
        and conversion.tree["data"]["packing"] is True
    )
    assert (
        conversion.tree["optim"]["scheduler"] == "cosine" and conversion.tree["optim"]["lr"] == 1e-5
    )
    assert conversion.tree["optim"]["min_lr"] == 1e-6
    assert conversion.tree["strategy"]["name"] == "megatron_fsdp"


def test_from_verl_reports_keys_it_cannot_carry(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\\n"
        "  actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent \\\n"
        "  actor_rollout_ref.rollout.n=4 \\\n  trainer.balance_batches=True\n"
    )
    conversion = convert_verl(script)
    assert conversion.tree["rollout"] == {"n": 4}
    assert len(conversion.dropped) == 2 and "single-turn" in conversion.dropped[0]
    assert "trainer.balance_batches=True" in conversion.dropped[1]


def test_from_verl_keeps_a_command_substitution_whole_and_says_it_is_not_run(tmp_path):
    """`name=run_$(date +%s)` is one shell word: shlex alone split it into `run_$(date` and
    `+%s)`, and the config got the broken half at exit 0. Kept whole (backquotes, nested
    and a `#` inside too), never run, and named in a note."""
    script = tmp_path / "run.sh"
    marker = tmp_path / "ran"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n"
        "  trainer.experiment_name=run_$(date +%s)_$(echo $(touch " + str(marker) + ")) \\\n"
        "  trainer.project_name=`echo a#b` \\\n"
        "  actor_rollout_ref.rollout.n=4\n"
    )
    conversion = convert_verl(script)
    assert conversion.tree["trainer"]["experiment_name"] == (
        f"run_$(date +%s)_$(echo $(touch {marker}))"
    )
    assert conversion.tree["trainer"]["project_name"] == "`echo a#b`"
    assert conversion.tree["rollout"] == {"n": 4}
    notes = [n for n in conversion.notes if "command substitution, not run here" in n]
    assert len(notes) == 2, conversion.notes
    assert not marker.exists()


def test_from_verl_reads_a_hash_inside_a_word_as_the_shell_does(tmp_path):
    """`#` starts a comment only at the start of a word, outside quotes: `run#2` is a value,
    and the keys after it on the continued command line are read (they were dropped)."""
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n"
        "  trainer.experiment_name=\\'run#2\\' \\\n"
        "  trainer.project_name=\"'x y#z'\" \\\n"
        "  actor_rollout_ref.rollout.n=4 # the group size\n"
    )
    conversion = convert_verl(script)
    assert conversion.tree["trainer"]["experiment_name"] == "run#2"
    assert conversion.tree["trainer"]["project_name"] == "x y#z"
    assert conversion.tree["rollout"] == {"n": 4}


def test_from_verl_yaml_config(tmp_path):
    path = tmp_path / "ppo.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": ["_self_"],
                "algorithm": {"adv_estimator": "grpo"},
                "data": {"train_batch_size": 16, "val_files": None, "max_response_length": 128},
                "actor_rollout_ref": {
                    "actor": {
                        "optim": {"lr": 1e-6, "lr_warmup_steps": -1},
                        "ppo_mini_batch_size": 8,
                    },
                    "rollout": {"n": 4, "mode": "sync"},
                },
                "trainer": {"logger": ["console"], "save_freq": -1},
            }
        )
    )
    conversion = convert_verl(path)
    assert conversion.command == "grpo" and not conversion.dropped
    assert conversion.tree["data"] == {"train_batch_size": 16, "filter_overlong_prompts": False}
    assert conversion.tree["rollout"] == {"max_response_length": 128, "n": 4}
    assert conversion.tree["optim"] == {"lr": 1e-6, "warmup_steps": 0}


def test_from_verl_refuses_what_is_not_a_verl_run(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("python train.py --lr 1e-5\n")
    with pytest.raises(VerlSourceError, match=r"no `python3 -m verl\.trainer\.main_ppo"):
        convert_verl(script)
    script.write_text("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=gae\n")
    assert convert_verl(script).dropped == [
        "algorithm.adv_estimator=gae: mfsdp trains GRPO only; set algorithm.adv_estimator=grpo"
        " (verl's default, gae, is PPO with a critic)"
    ]


def test_from_verl_command_line_exit_codes(tmp_path):
    ok = mfsdp("config", "from-verl", str(EXAMPLES / "run_grpo_megatron_fsdp.sh"))
    assert ok.returncode == 0, ok.stderr
    assert yaml.safe_load(ok.stdout)["actor"]["ppo_mini_batch_size"] == 16
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.multi_turn.enable=True\n"
    )
    partial = mfsdp("config", "from-verl", str(script))
    assert (
        partial.returncode == 1
        and "NOT carried over: actor_rollout_ref.rollout.multi_turn.enable=True" in partial.stdout
    )
    missing = mfsdp("config", "from-verl", str(tmp_path / "absent.sh"))
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0


def test_docs_name_every_verl_key():
    documented = (REPO / "docs" / "verl.md").read_text()
    for verl_key in RULES:
        assert verl_key.rsplit(".", 1)[-1] in documented, verl_key


def test_verl_megatron_lora_keys_map_to_the_model_section():
    """verl's Megatron backend sets LoRA as `model.lora.*` with Megatron module names: they
    map to the Hugging Face modules they fuse; a fused `lora.type` is refused by name."""
    tree: dict = {}
    for key, value in verl_keys.adopt_pairs(
        GRPOConfig,
        [
            ("actor_rollout_ref.model.lora.rank", 8),
            ("actor_rollout_ref.model.lora.alpha", 16),
            ("actor_rollout_ref.model.lora.target_modules", ["linear_qkv", "linear_fc2"]),
            ("actor_rollout_ref.model.lora.lora_A_init_method", "kaiming"),
        ],
        "test",
    ):
        tree[key] = value
    assert tree == {
        "model.lora_rank": 8,
        "model.lora_alpha": 16,
        "model.target_modules": ["q_proj", "k_proj", "v_proj", "down_proj"],
    }
    with pytest.raises(ConfigError, match="canonical_lora"):
        verl_keys.adopt_pairs(
            GRPOConfig,
            [
                ("actor_rollout_ref.model.lora.rank", 8),
                ("actor_rollout_ref.model.lora.type", "lora"),
            ],
            "t",
        )
