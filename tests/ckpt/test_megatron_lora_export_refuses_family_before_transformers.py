"""A Megatron LoRA adapter exported with the config.json of a family no mcore name table
converts is refused from its model_type, read as JSON, before transformers is imported, in
both of its routes (--adapter-only, and merged onto the base in --hf-config) as the plain
export is (test_export_refuses_mcore_family_before_transformers): both built the config
through transformers first (10-30 s on 2 cores) and only then found no table for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.ckpt.test_interop_megatron_peft import _hf_lora, _megatron_adapters
from tests.support.fresh_python import modules_after
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.megatron_checkpoints import save_dcp

# in a fresh interpreter: export an adapter under --hf-config; exits 0 only when that is
# refused as a usage error naming the family
_EXPORT_REFUSED = """
from mfsdp_ckpt.convert.export_errors import ExportUsageError
from mfsdp_ckpt.convert.export_hf import export_hf
try:
    export_hf(sys.argv[2], sys.argv[3], hf_config=sys.argv[4], adapter_only=sys.argv[5] == '1')
except ExportUsageError as err:
    assert "model family 'deepseek_v3' has no mcore name table" in str(err), err
else:
    raise SystemExit('not refused')
"""


@pytest.fixture(scope="module")
def adapter_alone(tmp_path_factory) -> tuple[Path, Path]:
    """A Megatron-Bridge style save of a tiny Llama's LoRA adapter alone (no base weights),
    and a base dir whose config.json names deepseek_v3, with a safetensors file beside it."""
    root = tmp_path_factory.mktemp("lora_family")
    model = tiny_causal_lm("llama")
    adapters = _megatron_adapters(model, _hf_lora(model))
    ckpt = save_dcp({"model": adapters, "iteration": 10}, root / "iter_0000010")
    base = root / "base"
    model.config.save_pretrained(base)
    data = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**data, "model_type": "deepseek_v3"}))
    save_file({"model.norm.weight": torch.ones(4)}, base / "model.safetensors")
    return ckpt, base


@pytest.mark.parametrize("adapter_only", [True, False], ids=["adapter_only", "merged"])
def test_family_without_mcore_table_is_refused_before_transformers(
    adapter_only, adapter_alone, tmp_path
):
    ckpt, base = adapter_alone
    out = tmp_path / "hf"
    args = (str(ckpt), str(out), str(base), "1" if adapter_only else "0")
    assert modules_after(_EXPORT_REFUSED, *args, roots=("transformers",)) == []
    assert not out.exists()
