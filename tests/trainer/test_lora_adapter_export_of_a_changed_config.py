"""An adapter-only export of a LoRA run trained with `model.overrides` names no base it was
not trained on.

The export named the base dir as `base_model_name_or_path` whatever config the run built its
model with: PEFT built the base from that dir's own config.json (rope_theta 10000 where the
run trained with 50, two layers where it trained one), loaded the adapter onto it with no
word, and its logits differed from the merged export's by more than their own size. Now the
field is null where the step's config differs from the base dir's, with a note naming the
keys and how to build the base trained on; followed, it gives the merged export's logits. A
base dir that is gone is named as recorded, with a note that it could not be checked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.support.export import fixed_inputs, logits_of
from tests.support.interop_layouts import run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft
from trainer.tiny import build_tiny_model_dir

LORA = ("model.lora_rank=4", "optim.lr=1e-2", "data.global_batch_size=4", "trainer.total_steps=1")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A base dir (`base`) and chat data (`train.jsonl`)."""
    root = tmp_path_factory.mktemp("changed_config")
    build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    write_chat_jsonl(root / "train.jsonl", rows=8)
    return root


def _lora_run(made: Path, base: Path, run: Path, *overrides: str) -> Path:
    run_sft(tiny_config(made / "train.jsonl", run, *LORA, f"model.path={base}", *overrides))
    return run


def _adapter_export(run: Path, out: Path) -> tuple[dict, list[str]]:
    """adapter_config.json of `export-hf RUN --adapter-only` and its notes (--json)."""
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, "--adapter-only", "--json")
    assert code == 0, stdout + err
    return json.loads((out / "adapter_config.json").read_text()), json.loads(stdout)["notes"]


def test_overridden_config_names_no_base_and_the_note_builds_the_one_trained(made, tmp_path):
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM

    overrides = "model.overrides={rms_norm_eps: 0.5, rope_theta: 50.0}"
    run = _lora_run(made, made / "base", tmp_path / "lora", overrides)
    config, notes = _adapter_export(run, tmp_path / "adapter")
    assert config["base_model_name_or_path"] is None
    step_config = run / "global_step_1" / "huggingface"
    said = [note for note in notes if "rms_norm_eps 1e-06 -> 0.5" in note]
    assert len(said) == 1 and "rope_theta': 50.0" in said[0], notes
    assert f"config=AutoConfig.from_pretrained({step_config.resolve()})" in said[0], said

    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "merged")
    assert code == 0, stdout + err
    inputs = fixed_inputs(AutoConfig.from_pretrained(str(made / "base")).vocab_size)
    base = AutoModelForCausalLM.from_pretrained(
        str(made / "base"), config=AutoConfig.from_pretrained(str(step_config)), dtype=torch.float32
    )  # the note's base, built as it says
    with torch.no_grad():
        peft = PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
        logits = peft(input_ids=inputs).logits
    merged = logits_of(tmp_path / "merged", inputs, torch.float32)
    torch.testing.assert_close(merged, logits, atol=1e-5, rtol=0)


def test_fewer_layers_are_named(made, tmp_path):
    run = _lora_run(
        made, made / "base", tmp_path / "lora", "model.overrides={num_hidden_layers: 1}"
    )
    config, notes = _adapter_export(run, tmp_path / "adapter")
    assert config["base_model_name_or_path"] is None
    assert any("num_hidden_layers 2 -> 1" in note for note in notes), notes


def test_the_base_config_unchanged_is_named_without_a_note(made, tmp_path):
    run = _lora_run(made, made / "base", tmp_path / "lora")
    config, notes = _adapter_export(run, tmp_path / "adapter")
    assert config["base_model_name_or_path"] == str((made / "base").resolve())
    assert not any("base_model_name_or_path" in note for note in notes), notes


def test_a_base_dir_gone_is_named_with_a_note_that_it_was_not_checked(made, tmp_path):
    base = Path(shutil.copytree(made / "base", tmp_path / "base"))
    run = _lora_run(made, base, tmp_path / "lora")
    shutil.rmtree(base)
    config, notes = _adapter_export(run, tmp_path / "adapter")
    assert config["base_model_name_or_path"] == str(base.resolve())
    said = [note for note in notes if f"{base.resolve()} is not here" in note]
    assert len(said) == 1 and "not checked to be the model the adapter was trained on" in said[0]
