"""A config.json that contradicts the model a Megatron checkpoint records is refused.

Megatron-Bridge keeps run_config.yaml beside its `hf/config.json`; Megatron-LM keeps its
`args` in the DCP, and `--hf-config` may name any model dir. A config with 2 heads of 16 in
1 query group gives every tensor the shapes 4 heads of 8 in 2 groups give: validate said
valid and export split the fused QKV by the wrong geometry (q/k/v scrambled, exit 0). A
config naming fewer tokens than recorded dropped real rows as "vocabulary padding".
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.support.export import logits_of
from tests.support.hf_model_files import changed_config_dir
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import (
    STEP,
    bridge_run,
    megatron_args,
    megatron_run,
    source_logits,
)

# The same tensor shapes as the model's 4 heads of 32 in 2 groups (hidden 128).
OTHER_HEADS = {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64}


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        (OTHER_HEADS, "num_attention_heads=2 (record: 4), num_key_value_heads=1 (record: 2)"),
        ({"vocab_size": 384}, "vocab_size=384 (record: 512)"),
    ],
)
def test_bridge_hf_config_contradicting_its_run_config_is_refused(changes, named, tmp_path):
    model = tiny_causal_lm("qwen2")
    run = bridge_run(tmp_path, model, steps=(10,))
    hf = changed_config_dir(model, run / "iter_0000010" / "hf", **changes)
    code, stdout, err = run_cli("ckpt", "validate", run, "--deep")
    assert code == 1 and f"error: {hf / 'config.json'}: {named}" in stdout, stdout + err
    assert "run_config.yaml model records" in stdout
    out = tmp_path / "out"
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", out)
    line = one_error_line(err)
    assert code == 1 and named in line and "pass --hf-config" in line, err
    assert not out.exists()


def test_hf_config_contradicting_megatron_args_is_bad_usage(tmp_path):
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model))
    wrong = changed_config_dir(model, tmp_path / "wrong", **OTHER_HEADS)
    out = tmp_path / "out"
    code, _, err = run_cli("ckpt", "export-hf", run, "--hf-config", wrong, "--out", out)
    line = one_error_line(err)
    assert code == 2 and line.startswith(f"error: --hf-config {wrong / 'config.json'}: num_att")
    assert f"iter_{STEP:07d} [args] records" in line and "leave --hf-config out" in line
    assert not out.exists()
    code, stdout, _ = run_cli("ckpt", "validate", run, "--hf-config", wrong)
    assert code == 1 and "head_dim=64 (record: 32)" in stdout, stdout


def test_a_config_agreeing_with_the_record_exports_keys_left_out_included(tmp_path):
    """Keys a config leaves out take their family's default (as many KV heads as heads,
    head_dim hidden / heads): no contradiction. A larger vocabulary than the record keeps
    every row and is not refused by this check."""
    model = tiny_causal_lm("llama", num_key_value_heads=4)
    args = megatron_args(model, vocab_size=500, padded_vocab_size=512)
    run = megatron_run(tmp_path, model, args)
    given = changed_config_dir(model, tmp_path / "given")
    data = json.loads((given / "config.json").read_text())
    for key in ("num_key_value_heads", "head_dim"):
        data.pop(key, None)
    (given / "config.json").write_text(json.dumps(data))
    out = tmp_path / "out"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--hf-config", given, "--out", out)
    assert code == 0, stdout + err
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given, "--deep")
    assert code == 0, stdout + err


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        (OTHER_HEADS, "num_attention_heads=2 (own: 4), num_key_value_heads=1 (own: 2)"),
        ({"model_type": "llama"}, "model_type='llama' (own: 'qwen2')"),
        # every shape alike, another computation
        ({"hidden_act": "gelu"}, "hidden_act='gelu' (own: 'silu')"),
        ({"rms_norm_eps": 1e-5}, "rms_norm_eps=1e-05 (own: 1e-06)"),
        (  # an older hub config's spelling of another RoPE base
            {"rope_parameters": None, "rope_theta": 1e6, "rope_scaling": None},
            "rope_parameters={'rope_theta': 1000000.0, 'rope_type': 'default'}"
            " (own: {'rope_theta': 10000.0, 'rope_type': 'default'})",
        ),
    ],
)
def test_hf_config_contradicting_the_checkpoints_own_config_is_refused(changes, named, tmp_path):
    """mfsdp's run (and verl's, the HF Trainer's) keeps its config.json beside the weights.
    Was: `--hf-config` of another head split, or of another family with the same tensor
    names, exported another model (logits off by 0.2-0.8) with exit 0, and validate passed."""
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    assets = build_tiny_model_dir(tmp_path / "assets")
    model = save_single_process_checkpoint(tmp_path / "run", assets)
    wrong = changed_config_dir(model, tmp_path / "wrong", **changes)
    own = tmp_path / "run" / "global_step_1" / "huggingface" / "config.json"
    out = tmp_path / "out"
    code, _, err = run_cli(
        "ckpt", "export-hf", tmp_path / "run", "--hf-config", wrong, "--out", out
    )
    line = one_error_line(err)
    assert code == 2 and line.startswith(f"error: --hf-config {wrong / 'config.json'}: {named}")
    assert f"not the model the checkpoint's own {own} describes" in line, line
    assert not out.exists()
    code, stdout, _ = run_cli("ckpt", "validate", tmp_path / "run", "--hf-config", wrong)
    assert code == 1 and named in stdout, stdout
    same = changed_config_dir(model, tmp_path / "same")  # its own config, given again: exported
    code, stdout, err = run_cli(
        "ckpt", "export-hf", tmp_path / "run", "--hf-config", same, "--out", out
    )
    assert code == 0, stdout + err


def test_a_hub_config_of_the_same_model_in_older_spelling_is_not_a_contradiction(tmp_path):
    """The model's own hub config.json, as transformers 4 wrote it (RoPE in rope_theta, a
    null rope_scaling, a sliding_window the saved config leaves out), describes the model
    the checkpoint's transformers 5 config.json does: exported, and validate passes."""
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    assets = build_tiny_model_dir(tmp_path / "assets")
    model = save_single_process_checkpoint(tmp_path / "run", assets)
    hub = changed_config_dir(
        model, tmp_path / "hub", rope_parameters=None, rope_theta=10000.0, rope_scaling=None
    )
    data = json.loads((hub / "config.json").read_text())
    del data["rope_parameters"], data["layer_types"]
    data.update(sliding_window=4096, max_window_layers=21, transformers_version="4.43.1")
    (hub / "config.json").write_text(json.dumps(data))
    code, stdout, err = run_cli(
        "ckpt", "export-hf", tmp_path / "run", "--hf-config", hub, "--out", tmp_path / "out"
    )
    assert code == 0, stdout + err
    code, stdout, err = run_cli("ckpt", "validate", tmp_path / "run", "--hf-config", hub)
    assert code == 0, stdout + err
