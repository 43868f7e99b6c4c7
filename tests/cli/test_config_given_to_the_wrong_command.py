"""A `--config` that is not what the command reads says what it is, in one line and before
torch loads: the other trainer's config ("unknown config key 'actor'"), a verl launch script
("top level must be a mapping of sections, found str"), and a second `--config` (the last
one was used, silently). Usage lines keep click's own lists readable."""

from __future__ import annotations

import pytest

from tests.support.fresh_python import MAIN_CATCHING_EXIT, mfsdp, modules_after
from tests.support.paths import REPO


@pytest.mark.parametrize(
    "command, config, told",
    [
        (
            "sft",
            "examples/grpo_tiny_cpu.yaml",
            "error: examples/grpo_tiny_cpu.yaml: looks like a GRPO config (it has the"
            " actor/rollout sections): use mfsdp train grpo\n",
        ),
        (
            "grpo",
            "examples/sft_tiny_cpu.yaml",
            "error: examples/sft_tiny_cpu.yaml: looks like an SFT config (it has"
            " data.global_batch_size, data.max_length, data.max_tokens_per_micro_batch):"
            " use mfsdp train sft\n",
        ),
        (
            "sft",
            "examples/verl/run_sft_megatron_fsdp.sh",
            "error: examples/verl/run_sft_megatron_fsdp.sh: a verl launch script (it runs"
            " verl.trainer.sft_trainer), not a YAML config; convert it with `mfsdp config"
            " from-verl examples/verl/run_sft_megatron_fsdp.sh > config.yaml`, then give"
            " --config config.yaml\n",
        ),
    ],
)
def test_another_kind_of_file_is_named_as_such(command, config, told):
    done = mfsdp("train", command, "--config", config)
    assert (done.returncode, done.stderr) == (2, told)


def test_the_check_comes_before_torch_loads():
    loaded = modules_after(
        MAIN_CATCHING_EXIT,
        "train",
        "grpo",
        "--config",
        "examples/verl/run_grpo_megatron_fsdp.sh",
        roots=("torch", "transformers"),
    )
    assert loaded == []


def test_a_shell_script_without_verl_is_no_yaml_config(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\nset -e\necho training\n")
    done = mfsdp("train", "sft", "--config", str(script))
    assert done.returncode == 2
    assert done.stderr == (
        f"error: {script}: a shell script, not a YAML config (`mfsdp config defaults sft|grpo`"
        " prints one to start from)\n"
    )


@pytest.mark.parametrize("config", sorted((REPO / "examples").glob("*.yaml")), ids=str)
def test_every_example_is_taken_by_its_own_command(config):
    from trainer.config import SFTConfig
    from trainer.config_kind import refuse_other_kind
    from trainer.grpo.config import GRPOConfig

    refuse_other_kind(GRPOConfig if "grpo" in config.name else SFTConfig, config)


def test_a_second_config_is_refused_not_silently_used():
    done = mfsdp(
        "train",
        "sft",
        "--config",
        "examples/sft_tiny_cpu.yaml",
        "--config",
        "examples/sft_gsm8k_qwen.yaml",
    )
    assert done.returncode == 2
    assert done.stderr == (
        "error: Invalid value for '--config': given 2 times (examples/sft_tiny_cpu.yaml,"
        " examples/sft_gsm8k_qwen.yaml); one file is read: give one, and change its keys with"
        " key=value overrides; see 'mfsdp train sft --help'\n"
    )


def test_a_missing_choice_lists_the_choices_on_one_line():
    done = mfsdp("config", "defaults")
    assert (done.returncode, done.stderr) == (
        2,
        "error: Missing argument 'TRAINER'. Choose from: sft, grpo; see"
        " 'mfsdp config defaults --help'\n",
    )


def test_what_a_user_typed_stays_escaped_in_a_usage_line():
    done = mfsdp("config", "defaults", "s\nft")
    assert done.returncode == 2
    assert "'s\\nft' is not one of 'sft', 'grpo'" in done.stderr and done.stderr.count("\n") == 1
