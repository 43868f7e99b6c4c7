"""Megatron-Bridge's builder-backed model config in run_config.yaml.

Bridge's BridgeGPTModelConfig (AutoBridge's `get_model_config()`, the recipes built on it)
is saved as Megatron-LM's `ModelConfig.as_dict` writes it: the GPT build fields flat under
`model:`, the TransformerConfig's (sizes, heads, norm, activation) under `model:
transformer:`, the activation by its short name (`silu`). Only the flat form was read:
inspect and export said the record lacked num_layers, and a `--hf-config` of another head
layout with the same tensor shapes was not compared with the record, so export-hf wrote
q/k/v scrambled with exit 0. A record that still derives no config now says that the
config was not checked against it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.megatron_record import recorded_config
from mfsdp_ckpt.format import checkpoint_resolution
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import assert_exports_to_source, one_error_line, run_cli
from tests.support.megatron_checkpoints import (
    bridge_builder_model_section,
    bridge_model_section,
    bridge_run,
)

# The same tensor shapes as the model's 4 heads of 32 in 2 groups (hidden 128).
OTHER_HEADS = {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64}


_ABSENT = object()  # a transformer field left out of the record


def _nested_run(tmp_path: Path, model, **transformer_changes) -> Path:
    def section(model) -> dict:
        written = bridge_builder_model_section(model)
        written["transformer"].update(transformer_changes)
        for key in [k for k, v in transformer_changes.items() if v is _ABSENT]:
            del written["transformer"][key]
        return written

    return bridge_run(tmp_path, model, steps=(10,), model_section=section)


def _derived(run: Path) -> dict:
    paths = checkpoint_resolution.resolve_checkpoint(run)
    derived = recorded_config(paths, CheckpointReader(paths.dist_ckpt))
    assert derived is not None
    return derived.config


def _other_heads(model, target: Path) -> Path:
    model.config.save_pretrained(target)
    data = json.loads((target / "config.json").read_text())
    data.update(OTHER_HEADS)
    (target / "config.json").write_text(json.dumps(data))
    return target


@pytest.mark.parametrize("family", ["qwen2", "llama", "qwen3_moe"])
def test_nested_record_derives_the_flat_records_config_and_exports_the_model(family, tmp_path):
    model = tiny_causal_lm(family)
    nested = bridge_run(
        tmp_path / "nested", model, steps=(10,), model_section=bridge_builder_model_section
    )
    flat = bridge_run(tmp_path / "flat", model, steps=(10,), model_section=bridge_model_section)
    assert _derived(nested) == _derived(flat)
    code, stdout, _ = run_cli("ckpt", "inspect", nested)
    assert code == 0 and "lacks" not in stdout and "run_config.yaml model;" in stdout, stdout
    assert_exports_to_source(model, nested, tmp_path / "hf", "--verify")


@pytest.mark.parametrize(
    "activation", ["silu", "torch.nn.functional.silu", {"_target_": "torch.nn.functional.silu"}]
)
def test_every_name_bridge_gives_silu_is_swiglu(activation, tmp_path):
    model = tiny_causal_lm("llama")
    run = _nested_run(tmp_path, model, activation_func=activation)
    assert _derived(run)["hidden_act"] == "silu"


def test_another_activation_is_refused_and_a_missing_one_asks_for_hf_config(tmp_path):
    model = tiny_causal_lm("llama")
    gelu = _nested_run(tmp_path / "gelu", model, activation_func="gelu")
    code, _, err = run_cli("ckpt", "export-hf", gelu, "--out", tmp_path / "a")
    line = one_error_line(err)
    assert code == 1 and "transformer.gated_linear_unit/activation_func=False" in line, err
    unnamed = _nested_run(tmp_path / "unnamed", model, activation_func=_ABSENT)
    code, _, err = run_cli("ckpt", "export-hf", unnamed, "--out", tmp_path / "b")
    line = one_error_line(err)
    assert code == 2 and "lacks swiglu" in line and "--hf-config" in line, err


def test_a_setting_in_both_places_with_two_values_is_refused(tmp_path):
    model = tiny_causal_lm("llama")

    def section(model) -> dict:
        written = bridge_builder_model_section(model)
        written["num_layers"] = 7
        return written

    run = bridge_run(tmp_path, model, steps=(10,), model_section=section)
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and "num_layers is 7 here and 2 in transformer" in line, err


def test_hf_config_of_another_head_layout_is_refused_against_the_nested_record(tmp_path):
    """Was: exit 0 and q/k/v scrambled (the record was not read, so not compared)."""
    model = tiny_causal_lm("llama")
    run = bridge_run(tmp_path, model, steps=(10,), model_section=bridge_builder_model_section)
    other = _other_heads(model, tmp_path / "other")
    out = tmp_path / "out"
    code, _, err = run_cli("ckpt", "export-hf", run, "--hf-config", other, "--out", out, "--verify")
    line = one_error_line(err)
    assert code == 2 and "num_attention_heads=2 (record: 4)" in line, err
    assert "run_config.yaml model records" in line and not out.exists()
    code, stdout, _ = run_cli("ckpt", "validate", run, "--hf-config", other)
    assert code == 1 and "num_key_value_heads=1 (record: 2)" in stdout, stdout


def test_a_record_that_derives_no_config_is_compared_on_what_it_holds(tmp_path):
    """A record lacking a setting the derivation needs still records the head layout: a
    config of another one is refused all the same (was: not compared, exit 0)."""
    model = tiny_causal_lm("llama")
    run = _nested_run(tmp_path, model, num_layers=_ABSENT)
    other = _other_heads(model, tmp_path / "other")
    code, _, err = run_cli("ckpt", "export-hf", run, "--hf-config", other, "--out", tmp_path / "a")
    line = one_error_line(err)
    assert code == 2 and "num_attention_heads=2 (record: 4)" in line, err
    model.config.save_pretrained(tmp_path / "same")
    code, _, err = run_cli(
        "ckpt", "export-hf", run, "--hf-config", tmp_path / "same", "--out", tmp_path / "b"
    )
    assert code == 0 and "not checked" not in err, err


def _without_heads(model) -> dict:
    written = bridge_builder_model_section(model)
    del written["transformer"]["num_attention_heads"], written["transformer"]["kv_channels"]
    return written


def _unreadable(model) -> dict:
    return {**bridge_builder_model_section(model), "transformer": 5}


def test_a_config_the_record_cannot_be_compared_with_is_said(tmp_path):
    why = "run_config.yaml model lacks num_attention_heads"
    model = tiny_causal_lm("llama")
    run = bridge_run(tmp_path, model, steps=(10,), model_section=_without_heads)
    given = tmp_path / "given"
    model.config.save_pretrained(given)
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--hf-config", given, "--out", tmp_path / "hf", "--json"
    )
    assert code == 0, err
    (note,) = [n for n in json.loads(stdout)["notes"] if "not checked" in n]
    assert note.startswith(f"--hf-config {given}: not checked against the checkpoint's record")
    assert why in note and "q/k/v" in note, note
    code, stdout, _ = run_cli("ckpt", "validate", run, "--hf-config", given, "--json")
    report = json.loads(stdout)
    assert code == 0 and report["valid"] is True
    (finding,) = report["findings"]
    assert finding["severity"] == "warning" and finding["where"] == str(given / "config.json")
    assert "not checked against the checkpoint's record" in finding["message"]
    code, _, _ = run_cli("ckpt", "validate", run, "--hf-config", given, "--strict")
    assert code == 1


def test_max_position_embeddings_from_seq_length_is_said(tmp_path):
    """Bridge records no max_position_embeddings: config.json takes the run's seq_length, the
    length it trained at (a recipe may set it below the model's), and says so."""
    model = tiny_causal_lm("llama")

    def section(model) -> dict:
        written = bridge_builder_model_section(model)
        written["seq_length"] = 48
        return written

    run = bridge_run(tmp_path, model, steps=(10,), model_section=section)
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf", "--json")
    assert code == 0, err
    assert (
        json.loads((tmp_path / "hf" / "config.json").read_text())["max_position_embeddings"] == 48
    )
    (note,) = [n for n in json.loads(stdout)["notes"] if n.startswith("max_position_embeddings")]
    assert "seq_length, the sequence length the run trained at" in note and "--hf-config" in note
    code, stdout, _ = run_cli("ckpt", "inspect", run)
    assert code == 0 and "max_position_embeddings 48 is" in stdout, stdout
    code, stdout, _ = run_cli("ckpt", "inspect", run, "--json")
    (note,) = json.loads(stdout)["recorded_model"]["notes"]
    assert "seq_length" in note


def test_a_record_that_cannot_be_read_refuses_the_config_given_against_it(tmp_path):
    """A damaged run_config.yaml is a damaged checkpoint with --hf-config too (exit 1, as
    without it): it was a note, and a warning with validate `valid`."""
    model = tiny_causal_lm("llama")
    run = bridge_run(tmp_path, model, steps=(10,), model_section=_unreadable)
    given = tmp_path / "given"
    model.config.save_pretrained(given)
    out = tmp_path / "hf"
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--hf-config", given, "--out", out)
    line = one_error_line(err)
    assert code == 1 and "run_config.yaml model: transformer is 5, not a mapping" in line, err
    assert not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 1 and "transformer is 5, not a mapping" in stdout, stdout + err
