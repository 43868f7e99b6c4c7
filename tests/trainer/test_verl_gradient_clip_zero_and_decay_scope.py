"""Two verl optimizer keys whose value means something else in verl than here.

verl's FSDP actor and optimizer hand `grad_clip` / `clip_grad` to torch's clip_grad_norm_
unchecked, where a norm of 0 scales every gradient by 0: the verl run never learns. mfsdp's
own `optim.clip_grad: 0` means no clipping, and `actor_rollout_ref.actor.grad_clip=0` was
carried over as that, training unclipped with a note saying it was the same setting. verl's
Megatron optimizer clips only above 0, as mfsdp does, so there it carries over.

verl's FSDP backend decays every parameter with `weight_decay`; mfsdp decays weight matrices
only (biases and norm weights get none). A converted run carried the value with no word.
"""

from __future__ import annotations

import logging

import pytest
import torch
import yaml

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.optim import clip_grad_norm
from trainer.verl_import import convert_verl

ACTOR = "actor_rollout_ref.actor."
GRPO_SCRIPT = (
    "python3 -m verl.trainer.main_ppo {options} algorithm.adv_estimator=grpo"
    " data.train_files=/d.parquet actor_rollout_ref.model.path=/m {keys}\n"
)
SFT_SCRIPT = (
    "torchrun --nproc_per_node=2 -m verl.trainer.sft_trainer data.train_files=/d.parquet"
    " model.path=/m {keys}\n"
)
MEGATRON = "--config-name=ppo_megatron_trainer"
ZEROES = "zeroes every gradient"
DECAYS_ALL = "verl's FSDP backend decays every parameter"


def script(tmp_path, text: str, *keys: str, options: str = ""):
    path = tmp_path / "run.sh"
    path.write_text(text.format(options=options, keys=" ".join(keys)))
    return convert_verl(path)


def decay_notes(conversion) -> list[str]:
    return [note for note in conversion.notes if DECAYS_ALL in note]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (GRPO_SCRIPT, f"{ACTOR}grad_clip=0"),
        (GRPO_SCRIPT, f"{ACTOR}optim.clip_grad=0.0"),
        (GRPO_SCRIPT, f"+{ACTOR}optim.grad_clip=-1"),  # a key verl adds with +
        (SFT_SCRIPT, "optim.clip_grad=0"),
        (SFT_SCRIPT, "+optim.grad_clip=0.0"),
    ],
)
def test_from_verl_lists_a_zero_clip_as_not_carried(tmp_path, text, key):
    conversion = script(tmp_path, text, key)
    refused = [item for item in conversion.dropped if item.startswith(key + ":")]
    assert len(refused) == 1 and ZEROES in refused[0], conversion.dropped
    assert "positive norm" in refused[0]
    assert conversion.tree.get("optim", {}).get("clip_grad") is None  # mfsdp's default stands


def test_from_verl_yaml_lists_a_zero_clip_as_not_carried(tmp_path):
    path = tmp_path / "sft.yaml"
    tree = {"model": {"partial_pretrain": "/m"}, "optim": {"lr": 1e-5, "clip_grad": 0}}
    path.write_text(yaml.safe_dump(tree))
    conversion = convert_verl(path, "sft")
    assert [item for item in conversion.dropped if ZEROES in item] == [
        next(item for item in conversion.dropped if item.startswith("optim.clip_grad=0:"))
    ]
    assert "clip_grad" not in conversion.tree["optim"]


def test_a_positive_clip_carries_over(tmp_path):
    conversion = script(tmp_path, GRPO_SCRIPT, f"{ACTOR}grad_clip=0.5")
    assert conversion.dropped == []
    assert conversion.tree["optim"]["clip_grad"] == 0.5


def test_megatron_zero_clip_is_no_clipping_there_and_here(tmp_path):
    conversion = script(tmp_path, GRPO_SCRIPT, f"{ACTOR}optim.clip_grad=0", options=MEGATRON)
    assert not [item for item in conversion.dropped if ZEROES in item]
    assert conversion.tree["optim"]["clip_grad"] == 0.0


@pytest.mark.parametrize(
    ("cls", "key"),
    [
        (GRPOConfig, f"{ACTOR}grad_clip=0"),
        (GRPOConfig, f"{ACTOR}optim.clip_grad=0"),
        (GRPOConfig, f"{ACTOR}optim.grad_clip=-0.5"),
        (SFTConfig, "optim.grad_clip=0"),
    ],
)
def test_train_refuses_a_zero_verl_clip_in_one_line(cls, key):
    with pytest.raises(ConfigError) as err:
        load_config(cls, None, [key])
    message = str(err.value)
    assert "\n" not in message
    assert key.split("=")[0] in message and ZEROES in message


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
def test_mfsdps_own_clip_zero_still_means_no_clipping(tmp_path, cls):
    assert load_config(cls, None, ["optim.clip_grad=0"]).optim.clip_grad == 0.0
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"optim": {"clip_grad": 0}}))
    assert load_config(cls, path).optim.clip_grad == 0.0
    grads = [torch.tensor([3.0, 4.0])]
    params = [torch.nn.Parameter(torch.zeros(2))]
    params[0].grad = grads[0].clone()
    assert clip_grad_norm(params, 0.0, torch.device("cpu")) == pytest.approx(5.0)
    assert torch.equal(params[0].grad, grads[0])  # measured, not clipped


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (GRPO_SCRIPT, f"{ACTOR}optim.weight_decay=0.1"),
        (SFT_SCRIPT, "optim.weight_decay=0.1"),
    ],
)
def test_from_verl_notes_a_given_decay_of_verls_fsdp_backend(tmp_path, text, key):
    conversion = script(tmp_path, text, key)
    assert conversion.tree["optim"]["weight_decay"] == 0.1
    notes = decay_notes(conversion)
    assert len(notes) == 1 and key.split("=")[0] in notes[0] and "\n" not in notes[0]


def test_from_verl_notes_verls_default_decay_left_unset(tmp_path):
    notes = decay_notes(script(tmp_path, SFT_SCRIPT))
    assert len(notes) == 1 and notes[0].startswith("optim.weight_decay=0.01:")


def test_from_verl_yaml_notes_its_decay(tmp_path):
    path = tmp_path / "sft.yaml"
    path.write_text(
        yaml.safe_dump({"model": {"partial_pretrain": "/m"}, "optim": {"weight_decay": 0.05}})
    )
    notes = decay_notes(convert_verl(path, "sft"))
    assert len(notes) == 1 and "optim.weight_decay=0.05" in notes[0]


@pytest.mark.parametrize(
    "keys", [(f"{ACTOR}optim.weight_decay=0.1",), ()], ids=["given", "verl's default"]
)
def test_no_decay_note_on_verls_megatron_backend(tmp_path, keys):
    conversion = script(tmp_path, GRPO_SCRIPT, *keys, options=MEGATRON)
    assert decay_notes(conversion) == []


def test_no_decay_note_without_decay(tmp_path):
    assert decay_notes(script(tmp_path, GRPO_SCRIPT, f"{ACTOR}optim.weight_decay=0")) == []


def test_train_notes_the_actors_decay_not_mfsdps_own(caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        load_config(GRPOConfig, None, [f"{ACTOR}optim.weight_decay=0.1"])
    said = [record.getMessage() for record in caplog.records if DECAYS_ALL in record.getMessage()]
    assert len(said) == 1 and f"{ACTOR}optim.weight_decay" in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        load_config(SFTConfig, None, ["optim.weight_decay=0.1"])
    assert not [record for record in caplog.records if DECAYS_ALL in record.getMessage()]
