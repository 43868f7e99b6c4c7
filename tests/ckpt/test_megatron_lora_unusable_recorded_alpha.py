"""A Megatron-Bridge LoRA save whose run_config.yaml `peft.alpha` is no positive number (-8, 0,
the string '8'): export-hf refuses it naming the record and --lora-alpha (exit 2), and with
--lora-alpha merges saying which record that flag overrode. Was: the export with
--lora-alpha said only "from --lora-alpha", as if nothing were recorded."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.ckpt.test_interop_megatron_peft import BRIDGE_PEFT, _bridge_lora_run, _hf_lora
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli

UNUSABLE = [-8, 0, "8"]


def bridge_save_with_alpha(tmp_path, alpha):
    """(run, run_config.yaml, base dir) of a Bridge adapter-only save recording `alpha`."""
    model = tiny_causal_lm("llama", vocab=500)
    run, step = _bridge_lora_run(tmp_path, model, _hf_lora(model), {**BRIDGE_PEFT, "alpha": alpha})
    assert yaml.safe_load((step / "run_config.yaml").read_text())["peft"]["alpha"] == alpha
    model.save_pretrained(tmp_path / "base")
    return run, step / "run_config.yaml", tmp_path / "base"


@pytest.mark.parametrize("alpha", UNUSABLE, ids=repr)
def test_export_names_the_record_and_lora_alpha_then_notes_the_override(tmp_path, alpha):
    run, record, base = bridge_save_with_alpha(tmp_path, alpha)
    unusable = f"{record} peft: alpha {alpha!r} is not a positive number"
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "o", "--hf-config", base)
    assert code == 2, err
    assert (
        one_error_line(err)
        == f"error: {unusable}; pass --lora-alpha A with the alpha the run trained with"
    )

    out = tmp_path / "adapter"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", out, "--adapter-only", "--lora-alpha", "8"
    )
    assert code == 0, stdout + err
    assert json.loads((out / "adapter_config.json").read_text())["lora_alpha"] == 8
    notes = [line for line in err.splitlines() if "from --lora-alpha" in line]
    assert len(notes) == 1 and f"from --lora-alpha, over {unusable}" in notes[0], err


def test_a_usable_record_is_no_override(tmp_path):
    run, _record, _base = bridge_save_with_alpha(tmp_path, 8)
    out = tmp_path / "adapter"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", out, "--adapter-only", "--lora-alpha", "8"
    )
    assert code == 0 and "from --lora-alpha" in err and ", over " not in err, stdout + err
