"""A directory holding checkpoints is read by what it holds, DCP dirs of their own
(`import-hf --layout mcore` writes one) counted beside runs.

`validate par2` (a run and such a checkpoint in it) said "par2 holds one run: reading
par2/sft" and judged that one, the other never named; `validate par1` (only such a
checkpoint) said "par1: not a checkpoint"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.hf_model_files import saved_hf_model
from tests.support.interop_layouts import one_error_line, run_cli


@pytest.fixture(scope="module")
def imports(tmp_path_factory) -> tuple[Path, Path]:
    """An import of one model as an mcore DCP dir, and as a run (`--layout hf`)."""
    root = tmp_path_factory.mktemp("imports")
    model = saved_hf_model(root / "model", "qwen2", tied=True)
    for layout_name in ("mcore", "hf"):
        code, _out, err = run_cli(
            "ckpt", "import-hf", model, "--out", root / layout_name, "--layout", layout_name
        )
        assert code == 0, err
    return root / "mcore", root / "hf"


def test_a_dir_of_one_mcore_import_reads_it_with_a_note(tmp_path, imports):
    mcore, _run = imports
    shutil.copytree(mcore, tmp_path / "par1" / "mc")
    code, _out, err = run_cli("ckpt", "validate", tmp_path / "par1")
    assert code == 0, err
    assert f"holds one checkpoint: reading {tmp_path / 'par1' / 'mc'}" in err, err


def test_a_run_beside_an_mcore_import_is_no_single_run(tmp_path, imports):
    mcore, run = imports
    shutil.copytree(mcore, tmp_path / "par2" / "mc")
    shutil.copytree(run, tmp_path / "par2" / "sft")
    code, _out, err = run_cli("ckpt", "validate", tmp_path / "par2")
    assert code == 2, err
    line = one_error_line(err)
    assert "holds 2 checkpoints; give one of them" in line, line
    assert str(tmp_path / "par2" / "mc") in line and str(tmp_path / "par2" / "sft") in line, line
