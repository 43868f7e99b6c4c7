"""`--dtype auto` writes the dtype config.json names even when config.json leaves out keys
its family's config class defaults (older Llama configs have no `mlp_bias`, Qwen3 and
Megatron-derived ones no `attention_bias`, some no `tie_word_embeddings`).

Such a config once went through transformers' meta-device model, whose `from_config`
set the config's dtype to the float32 it was built in: the export then wrote float32
tensors and a float32 config.json under a bf16 release's config, and its note called
float32 "config.json's dtype".
"""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp

SAFETENSORS_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}

# family -> config.json keys left out
CASES = {
    "llama without mlp_bias": ("llama", ("mlp_bias",)),
    "llama without any bias key": ("llama", ("mlp_bias", "attention_bias")),
    "qwen3 without attention_bias": ("qwen3", ("attention_bias",)),
    # no family table without it: transformers' meta-device model checks the names
    "llama without tie_word_embeddings": ("llama", ("tie_word_embeddings",)),
    "qwen3 without head_dim": ("qwen3", ("head_dim",)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype_key", ["torch_dtype", "dtype"])
def test_auto_writes_the_dtype_config_json_names(case, dtype_key, tmp_path):
    family, left_out = CASES[case]
    # qwen3's head_dim default is 128: the weights fit the config without the key
    changes = {"head_dim": 128} if family == "qwen3" else {}
    model = tiny_causal_lm(family, vocab=64, **changes)  # fp32 weights
    ckpt = save_dcp({"model": model.state_dict()}, tmp_path / "dist_ckpt")
    config = model.config.to_dict()
    for key in ("dtype", "torch_dtype", *left_out):
        config.pop(key, None)
    config[dtype_key] = "bfloat16"
    (tmp_path / "huggingface").mkdir()
    (tmp_path / "huggingface" / "config.json").write_text(json.dumps(config))
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", ckpt, "--out", out)
    assert code == 0, stdout + err
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        stored = {SAFETENSORS_NAMES[handle.get_slice(k).get_dtype()] for k in handle.keys()}
    exported = json.loads((out / "config.json").read_text())
    assert stored == {"bfloat16"}
    assert exported["dtype"] == "bfloat16"
    assert exported.get("torch_dtype", "bfloat16") == "bfloat16"
    assert "--dtype auto wrote bfloat16, config.json's dtype, over weights stored as float32" in err
    assert not set(left_out) & set(exported)  # nothing added to the user's config
