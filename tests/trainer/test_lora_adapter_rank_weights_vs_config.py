"""An adapter dir's `r` is compared with the rank its tensors carry (lora_A's first
dimension, lora_B's second) from the weights file's header, before PEFT builds a matrix
from it (trainer/lora_adapter_dir.py): `r: 2**40` was "out of memory" for 562 TB, and an r
of a few million first took GBs, where the rank the tensors carry is in the header. A rank
past both sizes of a weight it adapts (`model.lora_rank=2**40`, the same out of memory) is
refused naming the key and the module, before PEFT builds it (trainer/lora_targets.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.trainer import test_lora_adapter_dir
from tests.trainer.test_lora_adapter_dir import CONFIG, WEIGHTS, _build, _refusal
from trainer.config import ConfigError, ModelConfig
from trainer.tiny import tiny_config_kwargs

adapter = test_lora_adapter_dir.adapter  # its fixture: a PEFT adapter of r=2 on q_proj, v_proj


@pytest.mark.parametrize("rank", [2**40, 3_000_000, 16], ids=["2**40", "millions", "16"])
def test_an_r_other_than_the_tensors_rank_is_named_with_it(adapter, tmp_path, rank):
    copy = Path(shutil.copytree(adapter, tmp_path / "adapter"))
    config = json.loads((copy / CONFIG).read_text())
    (copy / CONFIG).write_text(json.dumps({**config, "r": rank}))
    tensors = load_file(str(copy / WEIGHTS))
    first = sorted(tensors)[0]  # a lora_A: its first dimension is the rank
    assert first.endswith(".lora_A.weight") and tensors[first].shape[0] == 2
    assert _refusal(copy) == (
        f"model.lora_adapter_path: {copy / WEIGHTS} [{first}]: shape"
        f" {list(tensors[first].shape)} carries rank 2,"
        f" but {copy / CONFIG} says r={rank}; set r to the rank the adapter was trained with"
    )


def test_a_lora_b_of_another_rank_is_named(adapter, tmp_path):
    copy = Path(shutil.copytree(adapter, tmp_path / "adapter"))
    tensors = load_file(str(copy / WEIGHTS))
    name = next(name for name in sorted(tensors) if ".lora_B." in name)
    tensors[name] = torch.zeros(tensors[name].shape[0], 5)
    save_file(tensors, str(copy / WEIGHTS))
    assert _refusal(copy) == (
        f"model.lora_adapter_path: {copy / WEIGHTS} [{name}]: shape"
        f" [{tensors[name].shape[0]}, 5] carries rank 5, but {copy / CONFIG} says r=2; set r"
        " to the rank the adapter was trained with"
    )


HIDDEN = tiny_config_kwargs(1)["hidden_size"]  # q_proj's sizes: the largest rank it takes


@pytest.mark.parametrize("rank", [2**40, HIDDEN + 1], ids=["2**40", "one-past"])
def test_a_rank_past_the_weights_it_adapts_is_refused_before_peft_builds_it(rank):
    with pytest.raises(ConfigError) as caught:
        _build(ModelConfig(lora_rank=rank, target_modules=["q_proj"]))
    assert str(caught.value) == (
        f"model.lora_rank={rank} exceeds the {HIDDEN} x {HIDDEN} weight of"
        f" model.layers.0.self_attn.q_proj it adapts (a LoRA rank is at most {HIDDEN} there)"
    )


def test_a_rank_of_the_weights_size_trains():
    model = _build(ModelConfig(lora_rank=HIDDEN, target_modules=["q_proj"]))
    shapes = {tuple(p.shape) for name, p in model.named_parameters() if ".lora_A." in name}
    assert shapes == {(HIDDEN, HIDDEN)}
