"""A run saves, in each step's huggingface/, the config it was given, whichever source it
starts from. Was: a run from a checkpoint (an import of a bf16 model, a run's step) built
its model with `from_config(config, dtype=float32)`, which set the run's own config to
float32; every step then said `"dtype": "float32"` and its export was an fp32 model twice
the size, where the same run from the model dir kept the base's bfloat16."""

from __future__ import annotations

import json
import shutil

import torch

from mfsdp_ckpt.convert.import_hf import import_hf
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import ModelConfig
from trainer.model import build_hf_config, build_model, load_tokenizer
from trainer.sft import run_sft
from trainer.tiny import build_tiny_model_dir


def _bf16_model_dir(tmp_path):
    from transformers import AutoModelForCausalLM

    base = build_tiny_model_dir(tmp_path / "fp32", with_weights=True)
    out = tmp_path / "bf16"
    AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(base / name, out / name)
    return out


def test_a_run_from_an_import_saves_the_config_a_run_from_the_model_dir_saves(tmp_path):
    model = _bf16_model_dir(tmp_path)
    import_hf(model, tmp_path / "imported", layout_name="hf")
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    saved = {}
    for name, path in (("dir", model), ("import", tmp_path / "imported" / "global_step_0")):
        run = tmp_path / name
        short = ("trainer.total_steps=1", "data.global_batch_size=4", f"model.path={path}")
        run_sft(tiny_config(data, run, *short))
        saved[name] = json.loads((run / "global_step_1/huggingface/config.json").read_text())
    assert saved["dir"]["dtype"] == "bfloat16"
    assert saved["import"] == saved["dir"]


def test_building_the_model_leaves_the_given_config_as_it_was():
    """Both builders (`from_config` for a checkpoint or random init, `from_pretrained` for a
    model dir) get a copy: the run saves the config it was given."""
    cfg = ModelConfig(random_init=True)
    config = build_hf_config(cfg, load_tokenizer(cfg))
    config.dtype = "bfloat16"
    before = config.to_dict()
    model = build_model(cfg, config, torch.device("cpu"), seed=0)
    assert config.to_dict() == before
    assert next(model.parameters()).dtype == torch.float32
