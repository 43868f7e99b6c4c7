"""What an adapter dir (`model.lora_adapter_path`) and the keys beside it say is never dropped
without a word (trainer/lora_adapter_dir.py).

A field the installed peft's LoraConfig does not know (an adapter saved by a newer peft with a
variant switch) was dropped by peft with a warning mfsdp never showed: the run trained plain
LoRA at exit 0 and the export wrote adapter_config.json without it. model.lora_rank,
lora_alpha and target_modules given beside the adapter were replaced by the adapter's own,
while config.yaml recorded the user's values against the manifest."""

from __future__ import annotations

import json
import logging
from dataclasses import fields

import peft
import pytest

from tests.trainer import test_lora_adapter_dir
from tests.trainer.test_lora_adapter_dir import CONFIG, TARGETS, _build, _edited, _refusal
from trainer.config import ModelConfig

adapter = test_lora_adapter_dir.adapter  # its fixture: a PEFT adapter on q_proj, v_proj


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("use_mystery_variant", True, "True"),
        ("mystery_config", {"k": 1}, "{'k': 1}"),
        ("mystery_rank", 8, "8"),
        ("mystery_mode", "fast", "'fast'"),
    ],
)
def test_an_option_the_installed_peft_does_not_know_is_refused(
    adapter, tmp_path, name, value, shown
):
    edited = _edited(adapter, tmp_path, **{name: value})
    assert _refusal(edited) == (
        f"model.lora_adapter_path: {edited / CONFIG}: {name}={shown} is a LoRA option the"
        f" installed peft {peft.__version__} does not know (an adapter saved by a newer"
        " peft?): it would be dropped and the adapter trained as plain LoRA; use a peft that"
        " knows it"
    )


def test_unknown_options_left_off_pass(adapter, tmp_path):
    """A newer peft writes every field it has, most at their defaults: those train as saved."""
    off = dict(new_a=None, new_b=False, new_c=0, new_d=0.0, new_e="", new_f=[], new_g={})
    edited = _edited(adapter, tmp_path, new_h="none", **off)
    assert any(".lora_A." in name for name, _ in _build(_model(edited)).named_parameters())


def test_every_field_the_installed_peft_writes_passes(adapter):
    """The fixture's adapter_config.json is peft's own save_pretrained: all its fields known."""
    written = json.loads((adapter / CONFIG).read_text())
    assert set(written) <= {field.name for field in fields(peft.LoraConfig)}
    assert any(".lora_A." in name for name, _ in _build(_model(adapter)).named_parameters())


def _model(adapter_dir, **keys) -> ModelConfig:
    return ModelConfig(lora_adapter_path=str(adapter_dir), **keys)


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        (dict(lora_rank=16), "model.lora_rank=16 is not used: {file} has r 2"),
        (dict(lora_alpha=64.0), "model.lora_alpha=64.0 is not used: {file} has lora_alpha 4"),
        (
            dict(target_modules=["o_proj"]),
            "model.target_modules=['o_proj'] is not used: {file} has target_modules {targets!r}",
        ),
    ],
    ids=["rank", "alpha", "targets"],
)
def test_a_key_the_adapter_replaces_is_said_unused_when_it_differs(adapter, keys, says, caplog):
    """verl trains the adapter it is given with its own settings, whatever lora_rank says: a
    script keeping its first stage's lora_rank beside the adapter runs, told once."""
    with caplog.at_level(logging.WARNING, logger="mfsdp.model"):
        model = _build(_model(adapter, **keys))
    targets = json.loads((adapter / CONFIG).read_text())["target_modules"]  # peft's order
    said = says.format(file=adapter / CONFIG, targets=targets)
    assert [record.getMessage() for record in caplog.records if said in record.getMessage()]
    adapted = {name.split(".")[-4] for name, _ in model.named_parameters() if ".lora_A." in name}
    assert adapted == set(TARGETS)  # the adapter's own targets train


@pytest.mark.parametrize(
    "keys",
    [
        dict(lora_rank=2, lora_alpha=4, target_modules=list(reversed(TARGETS))),  # the adapter's
        dict(lora_rank=0, lora_alpha=16.0, target_modules="all-linear"),  # the defaults
    ],
    ids=["adapters", "defaults"],
)
def test_a_key_at_the_adapters_value_or_its_default_passes(adapter, keys):
    model = _build(_model(adapter, **keys))
    adapted = {name.split(".")[-4] for name, _ in model.named_parameters() if ".lora_A." in name}
    assert adapted == set(TARGETS)
