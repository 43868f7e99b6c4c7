"""A quantized model's config.json is named, with what to do, before its scales are.

An fp8 release (DeepSeek-V3, Qwen3-FP8: `quantization_config` with quant_method fp8,
float8 weights and a `weight_scale_inv` beside each) was refused by import-hf as "14
tensor(s) unknown to llama", which neither said it was quantized nor what to do; export-hf
took such a config for `--hf-config` and would write unquantized weights under it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli


def _quantized(tmp_path: Path, quantization: object) -> Path:
    """A tiny model dir saved as an fp8 release is: float8 matrices with their scales."""
    from trainer.tiny import build_tiny_model_dir

    model_dir = build_tiny_model_dir(tmp_path / "fp8", with_weights=True)
    weights = load_file(model_dir / "model.safetensors")
    for name in [n for n, t in weights.items() if t.dim() == 2 and "embed" not in n]:
        weights[name] = weights[name].to(torch.float8_e4m3fn)
        weights[f"{name}_scale_inv"] = torch.ones(1, 1)
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((model_dir / "config.json").read_text())
    config["quantization_config"] = quantization
    (model_dir / "config.json").write_text(json.dumps(config))
    return model_dir


@pytest.mark.parametrize(
    "quantization, named",
    [
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "quant_method 'fp8'"),
        ({"bits": 4}, "no quant_method"),
    ],
)
def test_import_hf_names_a_quantized_model(quantization, named, tmp_path):
    model_dir = _quantized(tmp_path, quantization)
    code, _out, err = run_cli("ckpt", "import-hf", model_dir, "--out", tmp_path / "imported")
    line = one_error(err, f"{model_dir / 'config.json'}: a quantized model", named)
    assert code == 2 and "dequantize it first" in line and "unknown to" not in line, err
    assert not (tmp_path / "imported").exists()


def test_export_hf_refuses_a_quantized_config(tmp_path):
    """The export writes unquantized weights, which such a config would load as quantized."""
    import warnings

    import torch.distributed.checkpoint as dcp

    from trainer.tiny import build_tiny_model_dir

    plain = build_tiny_model_dir(tmp_path / "plain", with_weights=True)
    ckpt = tmp_path / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save({"model": load_file(plain / "model.safetensors")}, checkpoint_id=str(ckpt))
    model_dir = _quantized(tmp_path, {"quant_method": "fp8"})
    out = tmp_path / "hf"
    code, _out, err = run_cli("ckpt", "export-hf", ckpt, "--hf-config", model_dir, "--out", out)
    one_error(err, "a quantized model (quantization_config, quant_method 'fp8')")
    assert code == 2 and not out.exists(), err
    # validate takes the same --hf-config as the same bad usage, not as a damaged checkpoint
    code, stdout, err = run_cli("ckpt", "validate", ckpt, "--hf-config", model_dir)
    one_error(err, "--hf-config", "a quantized model (quantization_config, quant_method 'fp8')")
    assert code == 2 and "INVALID" not in stdout, stdout + err
