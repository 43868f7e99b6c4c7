"""A config.json whose RoPE or norm epsilon contradicts the Megatron record is refused.

No tensor shape shows rope_theta, rope scaling or rms_norm_eps, but the record holds what
the weights were trained with (Megatron-LM's rotary_base, norm_epsilon, use_rope_scaling;
Megatron-Bridge's rotary_base, layernorm_epsilon, rope_scaling). An --hf-config stating
other values exported with only the note "config.json from --hf-config", and validate said
valid: the export computed another model. They are compared as the head layout is.
"""

from __future__ import annotations

import pytest
import yaml

from mfsdp_ckpt.convert.record_values import value_disagreements
from tests.support.hf_model_files import changed_config_dir
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import assert_exports_to_source, one_error_line, run_cli
from tests.support.megatron_checkpoints import bridge_run, megatron_args, megatron_run

ROPE = {"position_embedding_type": "rope", "rotary_base": 10000, "norm_epsilon": 1e-6}
LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}, "rope_theta=1000000.0"),
        (  # an older hub config's spelling
            {"rope_parameters": None, "rope_theta": 5e5, "rope_scaling": None},
            "rope_theta=500000.0 (record: rotary_base 10000.0)",
        ),
        ({"rms_norm_eps": 1e-5}, "rms_norm_eps=1e-05 (record: norm_epsilon 1e-06)"),
        ({"rope_parameters": LLAMA3}, "rope scaling llama3 (factor 8.0"),
    ],
)
def test_megatron_args_against_another_rope_or_norm(changes, named, tmp_path):
    """Was: exit 0 with a note, the export's logits off."""
    model = tiny_causal_lm("llama")
    # Megatron-LM's args hold its rope scaling switches whether set or not
    args = megatron_args(model, use_rope_scaling=False, rotary_seq_len_interpolation_factor=None)
    run = megatron_run(tmp_path, model, args)
    given = changed_config_dir(model, tmp_path / "given", **changes)
    out = tmp_path / "hf"
    code, _, err = run_cli("ckpt", "export-hf", run, "--hf-config", given, "--out", out)
    line = one_error_line(err)
    assert code == 2 and named in line and "trained with the record's values" in line, err
    assert not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 1 and named in stdout, stdout + err


def test_the_same_values_in_either_spelling_export(tmp_path):
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model))
    given = changed_config_dir(
        model, tmp_path / "given", rope_parameters=None, rope_theta=10000, rope_scaling=None
    )
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 0, stdout + err
    assert_exports_to_source(model, run, tmp_path / "hf", "--hf-config", given)


def test_bridge_names_its_own_keys(tmp_path):
    model = tiny_causal_lm("llama")
    run = bridge_run(tmp_path, model, steps=(10,))
    step = run / "iter_0000010"
    changed_config_dir(model, step / "hf", rms_norm_eps=1e-5)
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and "rms_norm_eps=1e-05 (record: layernorm_epsilon 1e-06)" in stdout, (
        stdout + err
    )
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 1 and "layernorm_epsilon" in one_error_line(err), err
    data = yaml.safe_load((step / "run_config.yaml").read_text())
    data["model"] |= {"rope_scaling": True, "rope_scaling_factor": 32.0}
    (step / "run_config.yaml").write_text(yaml.safe_dump(data))
    changed_config_dir(model, step / "hf", rope_parameters={**LLAMA3, "factor": 32.0})
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0, stdout + err


@pytest.mark.parametrize(
    ("settings", "given", "found"),
    [
        # rotary_base is recorded whatever the position embedding; unused it says nothing
        ({**ROPE, "position_embedding_type": "learned_absolute"}, {"rope_theta": 1e6}, []),
        (ROPE, {"rope_theta": 1e4}, []),
        (ROPE, {}, []),  # a key the config leaves out takes its family's default
        ({"rotary_base": 1e6}, {"rope_theta": 1e4}, []),  # no position embedding recorded
        ({**ROPE, "use_rope_scaling": False}, {"rope_scaling": LLAMA3}, ["rope scaling"]),
        ({**ROPE, "use_rope_scaling": True}, {"rope_scaling": LLAMA3}, []),
        (
            {**ROPE, "use_rope_scaling": True, "rope_scaling_factor": 32.0},
            {"rope_scaling": LLAMA3},
            ["rope scaling"],
        ),
        (
            {**ROPE, "use_rope_scaling": True},
            {"rope_scaling": {**LLAMA3, "original_max_position_embeddings": 16}},
            ["rope scaling"],
        ),
        (
            {**ROPE, "rotary_seq_len_interpolation_factor": 2.0},
            {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
            [],
        ),
        (
            {**ROPE, "rotary_seq_len_interpolation_factor": 2.0},
            {"rope_scaling": {"rope_type": "linear", "factor": 4.0}},
            ["rope scaling"],
        ),
        ({**ROPE, "rotary_seq_len_interpolation_factor": None}, {"rope_theta": 1e4}, []),
        ({**ROPE, "use_rope_scaling": False}, {"rope_scaling": {"type": "yarn"}}, ["rope scaling"]),
        ({**ROPE, "norm_epsilon": 1e-5}, {"rms_norm_eps": "1e-6"}, []),  # named by hf_config
        ({**ROPE, "norm_epsilon": 1e-5}, {"rms_norm_eps": 1e-6}, ["rms_norm_eps"]),
    ],
)
def test_what_is_compared(settings, given, found):
    disagreements = value_disagreements(given, settings, {})
    assert len(disagreements) == len(found), disagreements
    assert all(d.startswith(f) for d, f in zip(disagreements, found)), disagreements
