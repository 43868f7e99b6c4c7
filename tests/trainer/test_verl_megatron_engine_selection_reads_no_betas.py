"""verl's SFT on its Megatron engine (`optim=megatron engine=megatron
engine.use_megatron_fsdp=True`, examples/sft/gsm8k/run_qwen_megatron_fsdp.sh at verl
1dda039) never passes `optim.betas` to its optimizer (verl/utils/megatron/optimizer.py
init_megatron_optim_config): it trains with Megatron's 0.9/0.999. The converted config kept
the script's [0.9, 0.95] without a word, where a GRPO run on the same backend got Megatron's.
A run is on that backend by its Megatron group selections (`model_engine=megatron`,
`engine=megatron`, `optim=megatron`) or a key only verl's Megatron engine has."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import SFTConfig
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl
from trainer.verl_keys import carry_over, keys_given
from trainer.verl_megatron_optim import on_megatron

MEGATRON = [0.9, 0.999]


def test_sft_on_verls_megatron_fsdp_engine_trains_with_megatrons_betas(tmp_path: Path):
    script = tmp_path / "sft.sh"
    script.write_text(
        "torchrun --nproc_per_node=8 -m verl.trainer.sft_trainer \\\n"
        "    data.train_files=/tmp/x.parquet model.path=/tmp/model \\\n"
        '    optim=megatron "optim.betas=[0.9,0.95]" engine=megatron \\\n'
        "    engine.use_megatron_fsdp=True\n"
    )
    done = convert_verl(script)
    assert done.tree["optim"]["betas"] == MEGATRON
    assert any("not read by verl's Megatron backend" in note for note in done.notes)


@pytest.mark.parametrize(
    "selection", [("model_engine", "megatron"), ("engine", "megatron"), ("optim", "megatron")]
)
def test_a_megatron_group_selection_puts_the_run_on_megatron(selection):
    assert on_megatron(dict([selection]))
    assert not on_megatron({selection[0]: "fsdp" if selection[0] != "model_engine" else "dp"})


@pytest.mark.parametrize(
    "cls, betas_key",
    [(SFTConfig, "optim.betas"), (GRPOConfig, "actor_rollout_ref.actor.optim.betas")],
)
def test_betas_beside_a_megatron_selection_are_megatrons(cls, betas_key):
    pairs = [(betas_key, [0.9, 0.95])]
    run = keys_given([("model_engine", "megatron"), *pairs])
    assert carry_over(cls, pairs, run) == [("optim.betas", MEGATRON)]


def test_an_fsdp_sft_run_keeps_its_betas(tmp_path: Path):
    script = tmp_path / "sft.sh"
    script.write_text(
        "torchrun -m verl.trainer.sft_trainer data.train_files=/tmp/x.parquet"
        ' model.path=/tmp/model "optim.betas=[0.9,0.95]" engine.ulysses_sequence_parallel_size=1\n'
    )
    assert convert_verl(script).tree["optim"]["betas"] == [0.9, 0.95]
