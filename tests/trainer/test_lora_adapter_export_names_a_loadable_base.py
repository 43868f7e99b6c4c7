"""An adapter-only export names as its base (`base_model_name_or_path`) what PEFT can load.

A LoRA run whose model.path was a checkpoint (the SFT -> GRPO route) recorded the
checkpoint's dist_ckpt dir as its base, and the export copied it: peft's
`AutoPeftModelForCausalLM.from_pretrained(ADAPTER)` then failed with "Unrecognized model in
.../dist_ckpt". Now a trained step is named by nothing (null), and a note on stderr names
the step to export first; the command it gives, followed, makes the base that PEFT loads the
adapter onto to the merged export's logits. An import-hf checkpoint is named by the Hugging
Face dir it was imported from, which AutoPeftModel loads."""

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
    """A base dir (`base`), a one-step full-parameter SFT run on it (`sft`), and its data."""
    root = tmp_path_factory.mktemp("adapter_base")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    chat = write_chat_jsonl(root / "train.jsonl", rows=8)
    settings = (f"model.path={base}", "data.global_batch_size=4", "trainer.total_steps=1")
    run_sft(tiny_config(chat, root / "sft", *settings))
    return root


def _lora_on(made: Path, run: Path, *overrides: str) -> Path:
    run_sft(tiny_config(made / "train.jsonl", run, *LORA, *overrides))
    return run


def _export(*args: object) -> str:
    """stderr of `mfsdp ckpt export-hf ARGS`, which must succeed."""
    code, stdout, err = run_cli("ckpt", "export-hf", *args)
    assert code == 0, stdout + err
    return err


def _peft_logits(base_dir: Path, adapter: Path, inputs: torch.Tensor) -> torch.Tensor:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    with torch.no_grad():
        return PeftModel.from_pretrained(base, str(adapter)).eval()(input_ids=inputs).logits


def _inputs(made: Path) -> torch.Tensor:
    return fixed_inputs(json.loads((made / "base" / "config.json").read_text())["vocab_size"])


def test_a_trained_step_as_base_is_null_and_the_note_leads_to_a_loadable_base(made, tmp_path):
    step = made / "sft" / "global_step_1"
    run = _lora_on(made, tmp_path / "lora", f"model.path={step}")
    err = _export(run, "--out", tmp_path / "adapter", "--adapter-only")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] is None
    command = f"mfsdp ckpt export-hf {step.resolve()} --out BASE_DIR`"
    notes = [line for line in err.splitlines() if command in line]
    assert len(notes) == 1 and notes[0].startswith("note: the base model is the checkpoint "), err

    _export(step.resolve(), "--out", tmp_path / "base_hf")  # the note's command, followed
    _export(run, "--out", tmp_path / "merged")
    inputs = _inputs(made)
    merged = logits_of(tmp_path / "merged", inputs, torch.float32)
    peft = _peft_logits(tmp_path / "base_hf", tmp_path / "adapter", inputs)
    torch.testing.assert_close(merged, peft, atol=1e-5, rtol=0)


def test_a_bare_dcp_base_is_told_to_export_with_its_config(made, tmp_path):
    bare = Path(shutil.copytree(made / "sft" / "global_step_1" / "dist_ckpt", tmp_path / "bare"))
    run = _lora_on(
        made, tmp_path / "lora", f"model.path={bare}", f"model.hf_config={made / 'base'}"
    )
    err = _export(run, "--out", tmp_path / "adapter", "--adapter-only")
    assert (
        f"`mfsdp ckpt export-hf {bare.resolve()} --out BASE_DIR --hf-config CONFIG_DIR`" in err
    ), err
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] is None


def test_an_imported_base_is_named_by_the_dir_it_came_from(made, tmp_path):
    from peft import AutoPeftModelForCausalLM

    code, stdout, err = run_cli(
        "ckpt", "import-hf", made / "base", "--out", tmp_path / "imp", "--layout", "hf"
    )
    assert code == 0, stdout + err
    run = _lora_on(made, tmp_path / "lora", f"model.path={tmp_path / 'imp'}")
    err = _export(run, "--out", tmp_path / "adapter", "--adapter-only")
    assert "note: the base model is the checkpoint" not in err
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str((made / "base").resolve())

    _export(run, "--out", tmp_path / "merged")
    inputs = _inputs(made)
    model = AutoPeftModelForCausalLM.from_pretrained(str(tmp_path / "adapter"), dtype=torch.float32)
    with torch.no_grad():
        peft = model.eval()(input_ids=inputs).logits
    merged = logits_of(tmp_path / "merged", inputs, torch.float32)
    torch.testing.assert_close(merged, peft, atol=1e-5, rtol=0)
