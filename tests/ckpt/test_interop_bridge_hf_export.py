"""Megatron-Bridge's Hugging Face export beside a step (`also_save_hf_checkpoint=True`).

checkpointing.py writes it into iter_N/hf/ (HF_WEIGHTS_SUBDIR): the weights, and the
config.json and tokenizer files of the model the run started from (save_artifacts). That
config.json is the run's own, as verl's huggingface/ is: export and validate read it
instead of deriving one from run_config.yaml (here a Llama 3.1 rope-scaled model's).
"""

from __future__ import annotations

import json
import shutil

import yaml

from mfsdp_ckpt.format import checkpoint_resolution
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import assert_exports_to_source, run_cli
from tests.support.megatron_checkpoints import bridge_run

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,  # Megatron-core fixes it (rotary_pos_embedding.py)
}


def _rope_scaled_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    plain = tiny_causal_lm("llama", vocab=500)
    settings = plain.config.to_dict() | {"rope_parameters": LLAMA3_ROPE}
    scaled = LlamaForCausalLM(LlamaConfig(**settings)).eval()
    scaled.load_state_dict(plain.state_dict())
    return scaled


def _scaled_bridge_run(tmp_path):
    model = _rope_scaled_llama()
    run = bridge_run(tmp_path, model, steps=(10,), rows=512)
    step = run / "iter_0000010"
    run_config = yaml.safe_load((step / "run_config.yaml").read_text())
    # what Megatron-Bridge's Llama31ModelProvider records (llama_provider.py)
    run_config["model"] |= {"rope_scaling": True, "rope_scaling_factor": 8.0}
    (step / "run_config.yaml").write_text(yaml.safe_dump(run_config))
    return model, run, step


def test_a_bridge_step_reads_its_hf_export_config(tmp_path):
    """Was: the run's config.json in iter_N/hf/ beside it unread."""
    model, run, step = _scaled_bridge_run(tmp_path)
    model.save_pretrained(step / "hf")  # weights, config.json
    for file in (step / "tokenizer").iterdir():
        shutil.copy2(file, step / "hf" / file.name)
    assert checkpoint_resolution.resolve_checkpoint(run).hf_dir == step / "hf"
    assert_exports_to_source(model, run, tmp_path / "out")
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and "warning" not in stdout, stdout + err
    code, stdout, err = run_cli("ckpt", "inspect", run, "--json")
    assert code == 0 and json.loads(stdout)["recorded_model"] is None, stdout + err


def test_a_peft_adapter_in_hf_is_no_config(tmp_path):
    """A PEFT run's iter_N/hf/ holds adapter_config.json only: the config is derived."""
    model = tiny_causal_lm("qwen2", vocab=500)
    run = bridge_run(tmp_path, model, steps=(10,), rows=512)
    (run / "iter_0000010" / "hf").mkdir()
    (run / "iter_0000010" / "hf" / "adapter_config.json").write_text("{}")
    assert checkpoint_resolution.resolve_checkpoint(run).hf_dir is None
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    assert code == 0 and "config.json derived from" in err, err
