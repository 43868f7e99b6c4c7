"""After `import-hf --dtype`, the hf layout's config.json names the dtype the weights were
written in (`dtype`, and `torch_dtype` where the source has it), so a plain export-hf writes
that dtype; a model kept in several stored dtypes gets a note on what export writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from cli.main import app
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.convert.import_hf import import_hf
from tests.support.hf_model_files import TINY, safetensors_tensors

CONFIG = Path("global_step_0") / "huggingface" / "config.json"


def _saved(root: Path, dtype: str) -> Path:
    """A random tiny Llama saved by transformers itself in `dtype`, config.json saying so."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    settings = {**TINY, "dtype": dtype}
    model = LlamaForCausalLM(LlamaConfig(**settings)).to(getattr(torch, dtype))
    out = root / f"llama_{dtype}"
    model.save_pretrained(out)
    return out


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"], ids=["transformers5", "transformers4"])
def test_cast_import_records_the_written_dtype_and_plain_export_keeps_it(key, tmp_path):
    source = _saved(tmp_path, "float32")
    config = json.loads((source / "config.json").read_text())
    config[key] = config.pop("dtype")  # the key the source's transformers wrote
    (source / "config.json").write_text(json.dumps(config))
    import_hf(source, tmp_path / "run", layout_name="hf", dtype="bf16")
    written = json.loads((tmp_path / "run" / CONFIG).read_text())
    assert written[key] == "bfloat16"
    validated = CliRunner().invoke(app, ["ckpt", "validate", str(tmp_path / "run")])
    assert validated.exit_code == 0, validated.output  # the manifest hashes the file as written
    export_hf(tmp_path / "run", tmp_path / "back")
    back, stored = safetensors_tensors(tmp_path / "back"), safetensors_tensors(source)
    assert {tensor.dtype for tensor in back.values()} == {torch.bfloat16}
    for name, tensor in stored.items():
        assert torch.equal(back[name], tensor.to(torch.bfloat16)), name


def test_mixed_stored_dtypes_say_what_export_writes(tmp_path):
    source = _saved(tmp_path, "bfloat16")
    tensors = load_file(source / "model.safetensors")
    norms = [name for name in tensors if name.endswith("norm.weight")]
    for name in norms:  # as some releases ship: bf16 matrices, fp32 norms
        tensors[name] = tensors[name].float() + 1e-3  # values bf16 cannot hold
    save_file(tensors, source / "model.safetensors", metadata={"format": "pt"})
    result = import_hf(source, tmp_path / "run", layout_name="hf")
    assert result.dtype == "bfloat16+float32"
    note = next(n for n in result.notes if n.startswith("weights kept in their stored dtypes"))
    assert f"float32 {len(norms)}" in note and "--dtype fp32 keeps every value" in note
    export_hf(tmp_path / "run", tmp_path / "back", dtype="fp32")
    back = safetensors_tensors(tmp_path / "back")
    for name, tensor in tensors.items():
        assert torch.equal(back[name], tensor.float()), name


def test_one_stored_dtype_gets_no_note(tmp_path):
    result = import_hf(_saved(tmp_path, "bfloat16"), tmp_path / "run", layout_name="hf")
    assert not any(n.startswith("weights kept in their stored dtypes") for n in result.notes)
