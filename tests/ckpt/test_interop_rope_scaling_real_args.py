"""Rope scaling against Megatron-LM's args as a real run records them.

Megatron-LM's args always hold use_rope_scaling, rope_scaling_factor and
rotary_seq_len_interpolation_factor (False, 8.0, None unless given), so a record of no
scaling is a statement: an --hf-config with Llama 3.1's scaling is another model (exit 2).
transformers' dynamic NTK scaling is not: up to max_position_embeddings it computes the
default RoPE, so within the trained length it is the model the record describes. Was:
exit 2, "rope scaling dynamic (record: none)".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.record_values import value_disagreements
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import assert_exports_to_source, one_error_line, run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

THETA = 10000.0
ROPE = {"position_embedding_type": "rope", "rotary_base": THETA, "use_rope_scaling": False}
DYNAMIC = {"rope_type": "dynamic", "rope_theta": THETA, "factor": 2.0}
LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": THETA,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def _given(model, target: Path, rope: dict) -> Path:
    model.config.save_pretrained(target)
    data = json.loads((target / "config.json").read_text())
    data["rope_parameters"] = rope
    (target / "config.json").write_text(json.dumps(data))
    return target


def test_the_default_args_record_no_scaling(tmp_path):
    """Megatron-LM's args as a run saves them (no switches passed) against Llama 3.1's
    scaling: the comparison runs on them as they are."""
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model))
    given = _given(model, tmp_path / "given", LLAMA3)
    code, _, err = run_cli("ckpt", "export-hf", run, "--hf-config", given, "--out", tmp_path / "o")
    line = one_error_line(err)
    assert code == 2 and "rope scaling llama3" in line and "(record: none)" in line, err


def test_dynamic_ntk_is_the_recorded_model_within_its_length(tmp_path):
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model))
    given = _given(model, tmp_path / "given", DYNAMIC)
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 0, stdout + err
    assert_exports_to_source(model, run, tmp_path / "hf", "--hf-config", given)


@pytest.mark.parametrize(
    ("settings", "rope", "differs"),
    [
        (ROPE, {"type": "dynamic", "factor": 4.0}, False),  # an older config's spelling
        ({**ROPE, "rotary_seq_len_interpolation_factor": 2.0}, DYNAMIC, True),
        ({**ROPE, "use_rope_scaling": True}, DYNAMIC, True),
        (ROPE, {"rope_type": "yarn", "factor": 2.0}, True),
        (ROPE, {"rope_type": "longrope", "factor": 2.0}, True),
    ],
)
def test_only_dynamic_compares_as_no_scaling(settings, rope, differs):
    found = value_disagreements({"rope_scaling": rope, "rope_theta": THETA}, settings, {})
    assert bool(found) == differs, found
