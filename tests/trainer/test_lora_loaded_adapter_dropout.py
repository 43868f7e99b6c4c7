"""An adapter loaded from `model.lora_adapter_path` trains with its own lora_dropout, as verl's
`PeftModel.from_pretrained(..., is_trainable=True)` keeps it (trainer/lora.py,
trainer/lora_adapter_dir.py); a fresh adapter's is 0, PEFT's default, as verl sets none.
The field was read as metadata and dropout forced to 0, because a resume could not redraw the
masks; every step now draws them from (seed, step, rank), so the resume stays bitwise."""

from __future__ import annotations

import json

import pytest
import torch

from mfsdp_ckpt.convert.lora_export import export_lora
from mfsdp_ckpt.format.manifest import read_manifest
from tests.support.override_lists import replaced
from tests.support.sft import tiny_config, write_chat_jsonl
from tests.trainer import test_lora_adapter_dir
from tests.trainer.test_lora_adapter_dir import CONFIG, _build, _edited, _refusal
from tests.trainer.test_resume_exact_with_dropout import SFT_SETTINGS, _assert_same_weights
from trainer.config import ModelConfig
from trainer.sft import run_sft

adapter = test_lora_adapter_dir.adapter  # its fixture: a PEFT adapter on q_proj, v_proj
DROPOUT = 0.1


def _dropouts(model: torch.nn.Module) -> list[float]:
    """The dropout probability before each injected adapter (PEFT's Identity when it is 0)."""
    from peft.tuners.lora import LoraLayer

    found = []
    for module in model.modules():
        if isinstance(module, LoraLayer) and len(module.lora_A):
            layer = module.lora_dropout["default"]
            found.append(layer.p if isinstance(layer, torch.nn.Dropout) else 0.0)
    return found


def test_a_loaded_adapter_trains_with_its_lora_dropout(adapter, tmp_path):
    loaded = _edited(adapter, tmp_path, lora_dropout=DROPOUT)
    dropouts = _dropouts(_build(ModelConfig(lora_adapter_path=str(loaded))))
    assert dropouts and set(dropouts) == {DROPOUT}


def test_a_fresh_adapter_has_no_dropout():
    dropouts = _dropouts(_build(ModelConfig(lora_rank=2, target_modules=["q_proj"])))
    assert dropouts and set(dropouts) == {0.0}


@pytest.mark.parametrize("value", [1.0, -0.1, "0.1", True, None])
def test_a_lora_dropout_that_is_no_probability_is_refused(adapter, tmp_path, value):
    message = _refusal(_edited(adapter, tmp_path, lora_dropout=value))
    assert f"{CONFIG}: lora_dropout is {value!r}, not a dropout probability" in message


def test_a_resume_with_a_loaded_adapters_dropout_is_bitwise_an_uninterrupted_run(adapter, tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=32)
    loaded = _edited(adapter, tmp_path, lora_dropout=DROPOUT)
    settings = (*SFT_SETTINGS[1:], f"model.lora_adapter_path={loaded}")
    straight = run_sft(tiny_config(data, tmp_path / "straight", *settings))
    run_sft(tiny_config(data, tmp_path / "split", *settings, "trainer.stop_at_step=2"))
    resumed = run_sft(tiny_config(data, tmp_path / "split", *settings))
    assert resumed.resumed_from == 2 and resumed.final_step == 4
    assert resumed.losses == {3: straight.losses[3], 4: straight.losses[4]}  # bitwise
    _assert_same_weights(straight.last_checkpoint, resumed.last_checkpoint)

    undropped = _edited(adapter, tmp_path / "undropped", lora_dropout=0.0)
    without = run_sft(
        tiny_config(
            data,
            tmp_path / "no_dropout",
            *replaced(settings, f"model.lora_adapter_path={undropped}", "trainer.total_steps=1"),
        )
    )
    assert straight.losses[1] != without.losses[1]  # the adapter's dropout is on
    manifest = read_manifest(resumed.last_checkpoint / "manifest.json")
    assert manifest.lora is not None and manifest.lora["lora_dropout"] == DROPOUT
    export_lora(resumed.last_checkpoint, tmp_path / "export", adapter_only=True)
    exported = json.loads((tmp_path / "export" / CONFIG).read_text())
    assert exported["lora_dropout"] == DROPOUT  # loading the export trains as this run did
