"""export-hf --json names the checkpoint it read and its step, as inspect and validate do.
Was: given a run dir, export resolved a step (its tracker, or the newest step dir) and its
JSON said neither, so a pipeline registering "step N" had to run inspect again, which a
newer save could race."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run


def _json(*args: object) -> dict:
    code, stdout, err = run_cli(*args, "--json")
    assert code == 0, stdout + err
    return json.loads(stdout)


def _two_step_run(root: Path, tracked: int) -> Path:
    """A Megatron-LM run dir holding iter_0000100 and iter_0000200, its tracker naming
    `tracked`."""
    model = tiny_causal_lm("qwen3")
    run = megatron_run(root, model, megatron_args(model))
    shutil.copytree(run / "iter_0000100", run / "iter_0000200")
    (run / "latest_checkpointed_iteration.txt").write_text(str(tracked))
    return run


def test_export_json_names_the_step_the_tracker_chose(tmp_path):
    run = _two_step_run(tmp_path, tracked=100)
    exported = _json("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    inspected = _json("ckpt", "inspect", run)
    validated = _json("ckpt", "validate", run)
    assert exported["step"] == 100, exported
    assert exported["checkpoint"] == str(run / "iter_0000100"), exported
    for other in (inspected, validated):
        assert (exported["checkpoint"], exported["step"]) == (other["checkpoint"], other["step"])


def test_export_json_of_a_step_dir_given_itself(tmp_path):
    run = _two_step_run(tmp_path, tracked=100)
    exported = _json("ckpt", "export-hf", run / "iter_0000200", "--out", tmp_path / "hf")
    assert (exported["checkpoint"], exported["step"]) == (str(run / "iter_0000200"), 200)
