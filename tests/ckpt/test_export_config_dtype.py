"""The exported config.json names the dtype the export wrote, whatever the copied one said.

A trainer keeps fp32 weights under the config.json of the bf16 release it started from
(`dtype` in transformers 5, `torch_dtype` before, sometimes both, sometimes neither or a
dtype no export writes). `--dtype auto` writes the config's dtype when it names one an
export writes, else the checkpoint's own; either way the exported config.json must say
what the safetensors hold, or `from_pretrained` builds the model in one dtype and loads
another (a bf16 config over fp32 tensors).
"""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp

SAFETENSORS_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}

# the copied config's dtype keys, --dtype -> the dtype written
CASES = {
    "dtype_auto": ({"dtype": "bfloat16"}, "auto", "bfloat16"),
    "torch_dtype_auto": ({"torch_dtype": "bfloat16"}, "auto", "bfloat16"),
    "both_auto": ({"dtype": "float32", "torch_dtype": "bfloat16"}, "auto", "float32"),
    "none_auto": ({}, "auto", "float32"),
    "unwritable_auto": ({"dtype": "int8"}, "auto", "float32"),
    "dtype_fp32": ({"dtype": "bfloat16", "torch_dtype": "bfloat16"}, "fp32", "float32"),
    "dtype_fp16": ({"dtype": "bfloat16"}, "fp16", "float16"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_config_dtype_is_the_dtype_written(case, tmp_path):
    keys, requested, written = CASES[case]
    model = tiny_causal_lm("llama", vocab=64)  # fp32 weights
    ckpt = save_dcp({"model": model.state_dict()}, tmp_path / "dist_ckpt")
    config = model.config.to_dict()
    for key in ("dtype", "torch_dtype"):
        config.pop(key, None)
    (tmp_path / "huggingface").mkdir()
    (tmp_path / "huggingface" / "config.json").write_text(json.dumps({**config, **keys}))
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", ckpt, "--out", out, "--dtype", requested)
    assert code == 0, stdout + err
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        stored = {SAFETENSORS_NAMES[handle.get_slice(k).get_dtype()] for k in handle.keys()}
    exported = json.loads((out / "config.json").read_text())
    assert stored == {written}
    assert exported["dtype"] == written
    assert exported.get("torch_dtype", written) == written
    # only auto's cast from the stored fp32 to the config's dtype is noted, once, naming
    # the --dtype that keeps the values (an import then export was silently not bit-exact)
    noted = "note: --dtype auto wrote bfloat16, config.json's dtype, over weights stored as"
    assert err.count(noted) == (requested == "auto" and written == "bfloat16"), err
    if noted in err:
        assert "float32; --dtype fp32 keeps their values bit for bit" in err
    assert "deprecated" not in err  # transformers' torch_dtype alias is not touched
