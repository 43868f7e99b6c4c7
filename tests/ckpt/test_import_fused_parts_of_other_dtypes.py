"""q, k and v stored in different dtypes (q_proj as float8, k/v as bf16) are merged into
Megatron's one linear_qkv by `import-hf --layout mcore`: that ended in a traceback
(torch.cat refuses to promote float8), and a bf16 q beside fp32 k/v would have taken q's
dtype silently. Refused in one line naming the parts, unless --dtype casts them alike."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli


def _q_in(dtype: torch.dtype, tmp_path: Path) -> tuple[Path, str]:
    """A tiny model dir whose first layer's q_proj alone is stored as `dtype`."""
    from trainer.tiny import build_tiny_model_dir

    model_dir = build_tiny_model_dir(tmp_path / "mixed", with_weights=True)
    weights = load_file(model_dir / "model.safetensors")
    name = next(n for n in sorted(weights) if n.endswith("layers.0.self_attn.q_proj.weight"))
    weights[name] = weights[name].to(dtype)
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    return model_dir, name


def test_parts_of_other_dtypes_are_refused_naming_them(tmp_path):
    model_dir, q = _q_in(torch.float8_e4m3fn, tmp_path)
    code, _out, err = run_cli("ckpt", "import-hf", model_dir, "--out", tmp_path / "imported")
    line = one_error(err, f"{model_dir}: {q} (float8_e4m3fn)", "stored in different dtypes")
    assert code == 1 and "--dtype" in line and "Traceback" not in err, err
    assert not (tmp_path / "imported").exists()


def test_with_dtype_each_part_is_cast_before_the_merge(tmp_path):
    model_dir, _q = _q_in(torch.float32, tmp_path)
    out = tmp_path / "imported"
    code, _out, err = run_cli("ckpt", "import-hf", model_dir, "--out", out, "--dtype", "bf16")
    assert code == 0, err
    code, _out, err = run_cli("ckpt", "validate", out, "--deep")
    assert code == 0, err
