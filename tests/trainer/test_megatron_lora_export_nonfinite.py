"""A Megatron-Bridge adapter saved alone holding a NaN is refused on export, merged onto
--hf-config's base or as a PEFT adapter, naming the tensor, and exported with
--allow-nonfinite, as every other export does: the adapter-only export wrote it without a
word, and both refused --allow-nonfinite itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ckpt.test_interop_megatron_peft import BRIDGE_PEFT, _bridge_lora_run, _hf_lora
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli

NAN_MODULE = "model.layers.0.self_attn.o_proj"  # linear_proj's B, not split on export


@pytest.fixture(scope="module")
def bridge_adapter_with_nan(tmp_path_factory) -> tuple[Path, Path]:
    """Megatron-Bridge's save of an adapter alone whose o_proj B holds one NaN, and its
    base as a Hugging Face dir."""
    root = tmp_path_factory.mktemp("bridge_nan")
    model = tiny_causal_lm("llama", vocab=500)
    lora = _hf_lora(model)
    lora[NAN_MODULE][1][0, 0] = float("nan")
    run, _ = _bridge_lora_run(root, model, lora, BRIDGE_PEFT)
    model.save_pretrained(root / "base")
    return run, root / "base"


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (
            ["--adapter-only"],
            ".layers.0.self_attention.linear_proj.adapter.linear_out.weight] (as"
            " base_model.model.model.layers.0.self_attn.o_proj.lora_B.weight)",
        ),
        (["--hf-config", "{base}"], f"[{NAN_MODULE}.weight] (merged with the adapter)"),
    ],
    ids=["adapter-only", "merged"],
)
def test_a_nan_in_a_megatron_adapter_saved_alone_is_refused_unless_allowed(
    bridge_adapter_with_nan, tmp_path, flags, named
):
    run, base = bridge_adapter_with_nan
    given = [flag.format(base=base) for flag in flags]
    out = tmp_path / "out"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, *given)
    line = one_error_line(err)
    assert code == 1, stdout + err
    assert named in line and " NaN/Inf value(s) as float32" in line, line
    assert line.endswith("--allow-nonfinite exports it anyway"), line
    assert not out.exists()
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, *given, "--allow-nonfinite")
    assert code == 0, stdout + err
    assert any(out.glob("*.safetensors"))
