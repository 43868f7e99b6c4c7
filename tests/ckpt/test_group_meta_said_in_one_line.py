"""Megatron's distributed optimizer saves ~20 group settings per parameter
(`optimizer.param_to_group_meta.<param>.<lr|betas|...>`): inspect says them in one line,
their count, parameters and distinct groups, and validate judges each distinct blob once
(a DCP save writes equal values as equal bytes) while still naming every entry that
differs.

Was: inspect listed every entry (342 lines for an 18-tensor model, ~400,000 for a
Qwen3-30B-A3B), and validate read and parsed each blob apart (2,000 parameters: 12.8 s,
--deep 75.9 s, most of it opening each ~1.3 KB blob's file and zip anew).
"""

from __future__ import annotations

import json
import os

import pytest

from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.cli_errors import error_prefixed_lines
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

META = "optimizer.param_to_group_meta"


class _RunsACommand:
    def __init__(self, marker):
        self.command = f"touch {marker}"

    def __reduce__(self):
        return (os.system, (self.command,))


def _run(tmp_path, change=lambda meta: None):
    """A Megatron-LM run with Adam state, `change` made to its group settings; and how many
    parameters those name (Megatron-core's: fc1 saved as weight_w and weight_v)."""
    model = tiny_causal_lm("llama", vocab=64)
    named = []

    def optimizer(adam: dict) -> dict:
        change(adam["param_to_group_meta"])
        named.extend(adam["param_to_group_meta"])
        return adam

    run = megatron_run(tmp_path, model, megatron_args(model), optimizer=optimizer)
    return run, len(named)


def _meta_line(run) -> str:
    code, stdout, err = run_cli("ckpt", "inspect", run)
    assert code == 0, stdout + err
    assert not [line for line in stdout.splitlines() if line.startswith(f"{META}.")], stdout
    (line,) = [line for line in stdout.splitlines() if line.startswith(META)]
    return line


def test_one_group_is_one_line_with_its_settings(tmp_path):
    run, parameters = _run(tmp_path)
    line = _meta_line(run)
    assert line.split()[1:3] == ["group", "settings"], line
    assert line.endswith(
        f"{4 * parameters} entries for {parameters} parameters: one group for all"
        " (lr=1e-05, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-08)"
    ), line
    _code, stdout, _ = run_cli("ckpt", "inspect", run, "--json")
    report = json.loads(stdout)
    (entry,) = [o for o in report["objects"] if o["name"].startswith(META)]
    assert entry["name"] == META and entry["note"] in line, entry
    assert report["totals"]["objects"] == len(CheckpointReader(run / "iter_0000100").objects)


def test_groups_are_told_apart_by_the_settings_that_differ(tmp_path):
    def no_decay_for_norms(meta: dict) -> None:
        for name, settings in meta.items():
            if "norm" in name:
                settings["weight_decay"] = 0.0

    run, parameters = _run(tmp_path, no_decay_for_norms)
    norms = 2 * 2 + 1  # two per layer, and the final one
    assert _meta_line(run).endswith(
        f"2 groups: weight_decay=0.1 ({parameters - norms} parameters);"
        f" weight_decay=0.0 ({norms} parameters)"
    )


@pytest.mark.parametrize("deep", [False, True])
def test_the_one_blob_that_differs_is_named_among_equal_ones(tmp_path, deep):
    marker = tmp_path / "RAN"
    evil = "module.module.module.decoder.layers.1.mlp.linear_fc2.weight"

    def one_runs_a_command(meta: dict) -> None:
        meta[evil]["lr"] = _RunsACommand(marker)

    run, _ = _run(tmp_path, one_runs_a_command)
    code, stdout, err = run_cli("ckpt", "validate", run, *(["--deep"] if deep else []))
    errors = error_prefixed_lines(stdout + err)
    assert code == 1 and len(errors) == 1, stdout + err
    assert f"[{META}.{evil}.lr]" in errors[0] and "system" in errors[0], errors[0]
    assert not marker.exists()


def test_a_damaged_blob_among_equal_ones_is_the_one_named(tmp_path):
    run, _ = _run(tmp_path)
    step = run / "iter_0000100"
    name = f"{META}.module.module.module.decoder.layers.0.mlp.linear_fc2.weight.eps"
    entry = CheckpointReader(step).objects[name]
    data = bytearray((step / entry.file).read_bytes())
    data[entry.file_offset + entry.length // 2] ^= 0xFF
    (step / entry.file).write_bytes(bytes(data))
    code, stdout, err = run_cli("ckpt", "validate", run, "--deep")
    errors = error_prefixed_lines(stdout + err)
    assert code == 1 and errors and all(f"[{name}]" in line for line in errors), stdout + err
