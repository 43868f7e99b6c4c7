"""validate says a data file of a Megatron-LM checkpoint that is missing or cut short once.
Was: the storage check said "referenced by .metadata but missing" and the config check,
reading `args` out of the same file to derive the model's config, said "file is missing"
again (a cut-short file: "truncated" and again "needs bytes [0, N)"), two findings with
one `where` for one fault."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

STEP_DIR = "iter_0000100"


def _run_without(root: Path, damage: str) -> tuple[Path, Path]:
    """(the run dir, its one data file), that file removed or cut short."""
    model = tiny_causal_lm("qwen3")
    run = megatron_run(root, model, megatron_args(model), optimizer=True)
    [data] = sorted((run / STEP_DIR).glob("*.distcp"))
    if damage == "missing":
        data.unlink()
    else:
        os.truncate(data, 1000)
    return run, data


@pytest.mark.parametrize("damage", ["missing", "cut_short"])
def test_the_data_file_is_one_finding(tmp_path, damage):
    run, data = _run_without(tmp_path, damage)
    code, stdout, err = run_cli("ckpt", "validate", run, "--json")
    assert code == 1, stdout + err
    findings = json.loads(stdout)["findings"]
    about_file = [f for f in findings if f["where"] == str(data)]
    assert len(about_file) == 1 and about_file[0]["severity"] == "error", findings


def test_the_text_output_names_the_missing_file_once(tmp_path):
    run, data = _run_without(tmp_path, "missing")
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1, stdout + err
    errors = [line for line in (stdout + err).splitlines() if line.startswith("error:")]
    assert errors == [f"error: {data}: referenced by .metadata but missing"], errors


def test_files_counts_what_the_checkpoint_is_made_of(tmp_path):
    """`files` is documented as the files checked, a missing one included (docs/json.md),
    as `tensors` counts the tensors .metadata names whether or not their bytes are there."""
    run, _data = _run_without(tmp_path, "missing")
    code, stdout, err = run_cli("ckpt", "validate", run, "--json")
    assert code == 1, stdout + err
    assert json.loads(stdout)["files"] == 2, stdout  # the data file and .metadata
