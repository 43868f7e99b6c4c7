"""A config.json naming more layers than the checkpoint holds weights for (another size of
the model, given with --hf-config or recorded) is said as that one fact: both layer
counts, on one line, with the exit code of a contradiction whatever the difference. Was:
export-hf said "num_hidden_layers=24 is over the 10 allowed" (the checkpoint's layers plus
a tolerance, worded as a limit of the tool's) with exit 2, but "checkpoint lacks 24
weight(s)" with exit 1 for a config two layers too big; validate printed one line per
missing weight (12,265 lines for 1024 layers against 2) and never said why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.convert.hf_config import MAX_LAYERS
from tests.support.cli_errors import error_prefixed_lines
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

HELD = "but the checkpoint holds weights for layers 0-1 only (2 layers)"


def _bare_dcp(root: Path) -> Path:
    """A two-layer Qwen2 as a bare DCP dir (no config of its own, as verl's are)."""
    model = tiny_causal_lm("qwen2")
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    dcp.save(state, checkpoint_id=root / "dist_ckpt", no_dist=True)
    return root / "dist_ckpt"


def _config_of(root: Path, layers: int) -> Path:
    """The same model's config.json, naming `layers` layers."""
    given = root / f"L{layers}"
    tiny_causal_lm("qwen2").config.save_pretrained(given)
    data = json.loads((given / "config.json").read_text())
    (given / "config.json").write_text(json.dumps({**data, "num_hidden_layers": layers}))
    return given


@pytest.mark.parametrize("layers", [4, 11, 24, MAX_LAYERS])
def test_export_with_a_larger_given_config_says_both_counts_exit_2(layers, tmp_path):
    ckpt, given = _bare_dcp(tmp_path), _config_of(tmp_path, layers)
    code, stdout, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", given, "--out", tmp_path / "hf"
    )
    errors = error_prefixed_lines(stdout + err)
    assert code == 2 and len(errors) == 1, stdout + err
    assert f"--hf-config {given / 'config.json'}: num_hidden_layers={layers}, {HELD}" in errors[0]
    assert "allowed" not in errors[0] and not (tmp_path / "hf").exists()


def test_export_with_a_larger_recorded_config_is_the_checkpoints_fault_exit_1(tmp_path):
    """The record (Megatron-LM's args) says 5 layers, the weights hold 2: no config was
    given, so the checkpoint contradicts itself (exit 1), said as the same fact."""
    model = tiny_causal_lm("qwen3")
    run = megatron_run(tmp_path, model, megatron_args(model, num_layers=5))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    errors = error_prefixed_lines(stdout + err)
    assert code == 1 and len(errors) == 1, stdout + err
    assert f"num_hidden_layers=5, {HELD}" in errors[0], errors


def test_validate_says_the_cause_first_and_counts_the_missing_weights(tmp_path):
    ckpt, given = _bare_dcp(tmp_path), _config_of(tmp_path, MAX_LAYERS)
    code, stdout, err = run_cli("ckpt", "validate", ckpt, "--hf-config", given)
    errors = error_prefixed_lines(stdout + err)
    assert code == 1 and len(errors) == 2, stdout + err
    assert errors[0].endswith(f"config.json: num_hidden_layers={MAX_LAYERS}, {HELD}"), errors
    missing = (MAX_LAYERS - 2) * 12  # a Qwen2 layer's 12 weights (q/k/v with biases)
    assert f": {missing} weights it expects (qwen2) are missing: [" in errors[1], errors
    assert errors[1].endswith(f" (+{missing - 3} more)"), errors


def test_validate_counts_weights_a_smaller_config_has_no_place_for(tmp_path):
    ckpt, given = _bare_dcp(tmp_path), _config_of(tmp_path, 1)
    code, stdout, err = run_cli("ckpt", "validate", ckpt, "--hf-config", given)
    errors = error_prefixed_lines(stdout + err)
    assert code == 1 and len(errors) == 1, stdout + err
    assert ": 12 weights are unexpected for qwen2 per it: [" in errors[0], errors
    assert errors[0].endswith(" (+9 more)"), errors


def test_the_tools_own_limit_is_said_apart_with_the_same_number_everywhere(tmp_path):
    """A config past hf_config.MAX_LAYERS: validate names the contradiction, then the
    limit; the limit is one number, not one derived from the checkpoint."""
    ckpt, given = _bare_dcp(tmp_path), _config_of(tmp_path, 10**9)
    code, stdout, err = run_cli("ckpt", "validate", ckpt, "--hf-config", given)
    errors = error_prefixed_lines(stdout + err)
    assert code == 1 and len(errors) == 2, stdout + err
    assert f"num_hidden_layers={10**9}, {HELD}" in errors[0], errors
    assert errors[1].endswith(f"num_hidden_layers={10**9} is over the {MAX_LAYERS} allowed")
