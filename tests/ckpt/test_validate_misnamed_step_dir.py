"""A step dir named `global_step_` and its number spelled otherwise (leading zeros, full-width
digits, a sign, a fraction, an exponent) is an error naming the `global_step_<N>` its
manifest records, as `global_step_10` holding step 2 says the two disagree.

Was: `validate RUN/global_step_00010` of a copy of step 2 said "valid ... step 2": such a
name is no step dir of the run, so the check of its name against the manifest was skipped.
A copy under a name of the user's (`best/`, `global_step_2_good`) is read as before, and
the run dir still ignores these names. A zero-padded name of the step it holds
(`global_step_00002`) stays valid, as it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # mfsdp's layout: tracker and global_step_2
SPELLINGS = ["00010", "\uff12", "-1", "1e3", "+2", "2.0", "0x2"]


@pytest.fixture
def run(tmp_path) -> Path:
    shutil.copytree(RUN, tmp_path / "run")
    return tmp_path / "run"


def _copy_of_step_2(run: Path, name: str) -> Path:
    copy = run / name
    shutil.copytree(run / "global_step_2", copy)
    return copy


@pytest.mark.parametrize("number", SPELLINGS)
def test_a_number_spelled_otherwise_is_an_error_naming_the_name(run, number):
    step = _copy_of_step_2(run, f"global_step_{number}")
    code, out, err = run_cli("ckpt", "validate", step)
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert code == 1 and out.splitlines()[-1].startswith("INVALID:"), out + err
    shown = str(step).replace("\uff12", "\\uff12")  # escaped: it reads as an ASCII 2
    assert errors == [
        f"error: {shown}/manifest.json: says step 2, but the directory is named"
        f" {Path(shown).name}, not global_step_2"
    ], out


@pytest.mark.parametrize(
    "name", ["global_step_2", "global_step_00002", "global_step_2_good", "best"]
)
def test_the_canonical_name_and_names_of_the_users_stay_valid(run, name):
    step = run / name if name == "global_step_2" else _copy_of_step_2(run, name)
    code, out, err = run_cli("ckpt", "validate", step)
    assert code == 0 and out.startswith(f"valid: {step / 'dist_ckpt'} (mfsdp, step 2,"), out + err


@pytest.mark.parametrize("tracked", [True, False], ids=["tracker", "no tracker"])
def test_the_run_dir_still_ignores_them(run, tracked):
    for number in SPELLINGS:
        _copy_of_step_2(run, f"global_step_{number}")
    if not tracked:
        (run / "latest_checkpointed_iteration.txt").unlink()
    code, out, err = run_cli("ckpt", "validate", run, "--json")
    assert code == 0, out + err
    assert json.loads(out)["checkpoint"] == str(run / "global_step_2" / "dist_ckpt"), out


def test_export_refuses_it_as_validate_does(run, tmp_path):
    """export-hf checks a step as validate does: it refused `global_step_10` holding step 2,
    and exported `global_step_00010` holding it."""
    step = _copy_of_step_2(run, "global_step_00010")
    code, _out, err = run_cli("ckpt", "export-hf", step, "--out", tmp_path / "hf")
    assert code == 1 and "the directory is named global_step_00010, not global_step_2" in err
    assert not (tmp_path / "hf").exists()
