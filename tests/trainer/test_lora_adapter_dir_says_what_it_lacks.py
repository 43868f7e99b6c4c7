"""What `model.lora_adapter_path` refuses says what the dir lacks and what works
(trainer/lora_adapter_dir.py):

- a tensor holding NaN/Inf is refused at load, naming the file and tensor (exit 1, as a
  model dir's NaN weights are): it trained to "step 1: gradient norm is nan", which
  blamed the step, not the adapter;
- an absent r, lora_alpha or target_modules is said to be absent, with what PEFT would
  assume (it said "'lora_alpha' is None", as if the file said null);
- a verl actor, step or run dir holding lora_adapter/, or an mfsdp LoRA run or step, is named
  with where its adapter is or what writes it (each was told its adapter_config.json is
  missing, though mfsdp knows what the dir is)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.errors import MfsdpFailedError
from tests.support.sft import SHORT_RUN, tiny_config, write_chat_jsonl
from tests.trainer import test_lora_adapter_dir
from tests.trainer.test_lora_adapter_dir import CONFIG, _build, _refusal, _weights_edit
from trainer.config import ModelConfig
from trainer.finite_weights import NonFiniteWeightsError
from trainer.sft import run_sft

adapter = test_lora_adapter_dir.adapter  # its fixture: a PEFT adapter on q_proj, v_proj


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_a_nonfinite_tensor_is_refused_at_load_naming_it(adapter, tmp_path, bad):
    def poisoned(tensors, name):
        tensors[name] = tensors[name].clone()
        tensors[name][0, 0] = bad

    edited, name = _weights_edit(adapter, tmp_path, poisoned)
    with pytest.raises(NonFiniteWeightsError) as caught:
        _build(ModelConfig(lora_adapter_path=str(edited)))
    assert isinstance(caught.value, MfsdpFailedError)  # exit 1
    assert str(caught.value) == (
        f"model.lora_adapter_path: {edited / 'adapter_model.safetensors'} [{name}]: holds 1"
        " NaN/Inf value(s) (a diverged run's adapter?); training from it would only give NaN"
    )


@pytest.mark.parametrize(
    "field, says",
    [
        ("lora_alpha", "PEFT would assume 8; set it to the alpha the adapter was trained with"),
        ("r", "PEFT would assume 8; set it to the adapter's rank, the first dimension of its"),
        ("target_modules", "PEFT would pick the model type's default modules; set it to the"),
    ],
)
def test_an_absent_field_is_said_to_be_absent(adapter, tmp_path, field, says):
    copy = Path(shutil.copytree(adapter, tmp_path / "adapter"))
    config = json.loads((copy / CONFIG).read_text())
    del config[field]
    (copy / CONFIG).write_text(json.dumps(config))
    message = _refusal(copy)
    assert message.startswith(f"model.lora_adapter_path: {copy / CONFIG}: has no {field!r} ({says}")
    assert "None" not in message


@pytest.mark.parametrize(
    "level, inside", [("actor", "lora_adapter"), ("", "actor/lora_adapter")], ids=["actor", "step"]
)
def test_a_verl_dir_holding_the_adapter_says_where_it_is(adapter, tmp_path, level, inside):
    step = tmp_path / "global_step_3"
    (step / "actor").mkdir(parents=True)
    torch.save({}, step / "actor" / "model_world_size_1_rank_0.pt")
    shutil.copytree(adapter, step / "actor" / "lora_adapter")
    assert _refusal(step / level).endswith(
        f"; it holds a PEFT adapter dir, {inside}/: point model.lora_adapter_path at"
        f" {step / 'actor' / 'lora_adapter'}"
    )


@pytest.mark.parametrize("tracked", [True, False], ids=["tracker", "newest-step"])
def test_a_verl_run_dir_names_its_steps_adapter(adapter, tmp_path, tracked):
    """The step verl resumes: the tracker's, else the newest by number (10 after 9)."""
    run = tmp_path / "checkpoints"
    for step in (9, 10):
        actor = run / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        shutil.copytree(adapter, actor / "lora_adapter")
    if tracked:
        (run / "latest_checkpointed_iteration.txt").write_text("9")
    step = "global_step_9" if tracked else "global_step_10"
    assert _refusal(run).endswith(
        f"; it is a run dir whose step {step} holds a PEFT adapter dir: point"
        f" model.lora_adapter_path at {run / step / 'actor' / 'lora_adapter'}"
    )


def test_an_mfsdp_lora_run_says_what_writes_its_adapter(tmp_path):
    data, run = write_chat_jsonl(tmp_path / "train.jsonl", rows=8), tmp_path / "run"
    given = ("model.lora_rank=2", "trainer.total_steps=1")
    assert run_sft(tiny_config(data, run, *SHORT_RUN, *given)).final_step == 1
    for where in (run, run / "global_step_1"):
        assert _refusal(where).endswith(
            f"; {where} is an mfsdp LoRA checkpoint: `mfsdp ckpt export-hf {where} --out DIR"
            " --adapter-only` writes its adapter, which model.lora_adapter_path=DIR takes (or"
            " continue its run with trainer.run_dir)"
        )
