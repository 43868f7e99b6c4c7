"""Megatron-LM's flags given to `mfsdp train` (`--lr 1e-3`, `--save DIR`) are told the config
key of the same meaning, with the value given, instead of "No such option" or a guess as
unrelated as '--help'; a flag with no such key says so."""

from __future__ import annotations

import re

import pytest

from cli.megatron_flags import FLAGS
from tests.support.cli_errors import usage_error_line
from trainer.config import SFTConfig
from trainer.grpo.config import GRPOConfig
from trainer.verl_keys import is_native


@pytest.mark.parametrize(
    "given, meant",
    [
        (["--lr", "1e-3"], "optim.lr=1e-3"),
        (["--lr=1e-3"], "optim.lr=1e-3"),
        (["--save", "runs/mine"], "trainer.run_dir=runs/mine"),
        (["--load", "ckpts/a"], "checkpoint.resume=ckpts/a (a checkpoint to continue)"),
        (["--load", "ckpts/a"], "model.path=ckpts/a (weights to start from)"),
        (["--train-iters", "20"], "trainer.total_steps=20"),
        (["--train_iters", "20"], "trainer.total_steps=20"),
        (["--micro-batch-size", "2"], "data.micro_batch_size=2"),
        (["--global-batch-size", "64"], "data.global_batch_size=64"),
        (["--seq-length", "512"], "data.max_length=512"),
        (["--min-lr", "0"], "optim.min_lr=0"),
        (["--lr-warmup-iters", "10"], "optim.warmup_steps=10"),
        (["--seed", "7"], "trainer.seed=7"),
        (["--bf16"], "strategy.mixed_precision=bf16"),
    ],
)
def test_a_megatron_flag_to_train_sft_is_told_its_key(monkeypatch, capsys, given, meant):
    args = ["train", "sft", "--config", "examples/sft_tiny_cpu.yaml", *given]
    said = usage_error_line(monkeypatch, capsys, *args)
    flag = given[0].partition("=")[0]
    assert said.startswith(f"error: No such option '{flag}' for 'mfsdp train sft': "), said
    assert meant in said and said.endswith("; see 'mfsdp train sft --help'"), said


def test_grpo_is_told_its_own_keys(monkeypatch, capsys):
    said = usage_error_line(monkeypatch, capsys, "train", "grpo", "--global-batch-size", "64")
    assert "actor.ppo_mini_batch_size=64" in said and "data.global_batch_size" not in said


def test_a_flag_with_no_equivalent_says_so(monkeypatch, capsys):
    said = usage_error_line(monkeypatch, capsys, "train", "sft", "--ckpt-format", "torch_dist")
    assert "--ckpt-format has no equivalent in mfsdp: checkpoints are always DTensor" in said


def test_the_word_after_a_flag_without_a_value_is_not_taken_as_its_value(monkeypatch, capsys):
    said = usage_error_line(monkeypatch, capsys, "train", "sft", "--bf16", "optim.lr=1e-4")
    assert said.endswith("as strategy.mixed_precision=bf16; see 'mfsdp train sft --help'"), said


@pytest.mark.parametrize("config, command", [(SFTConfig, "sft"), (GRPOConfig, "grpo")])
def test_every_key_the_table_names_is_a_key_of_that_command(config, command):
    for flag, meant in FLAGS.items():
        for key in re.findall(r"\b([a-z_]+(?:\.[a-z_]+)+)=", meant.for_command(command)):
            assert is_native(config, key), f"{flag} names {key}, no key of {command}"


@pytest.mark.parametrize(
    "args",
    [
        ["ckpt", "validate", "runs/x", "--lr", "1"],  # click's only guess was '--help'
        ["train", "sft", "--lr-typo-of-nothing"],
    ],
)
def test_a_guess_far_from_the_option_given_is_not_offered(monkeypatch, capsys, args):
    said = usage_error_line(monkeypatch, capsys, *args)
    assert "did you mean" not in said, said
