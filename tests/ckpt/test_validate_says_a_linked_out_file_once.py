"""validate says one fault of a data file once: a .distcp linked out of the checkpoint gave
"symlink points outside the checkpoint" (the read's check) and "resolves outside the
checkpoint" (the manifest's), and --deep a third line quoting the first (the tied head's
comparison that could not read it); a file cut short gave "metadata needs" and "manifest
says"."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli_errors import error_prefixed_lines
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # mfsdp's layout, with a manifest
STEP = "global_step_2"


def _errors(*args: object) -> list[str]:
    code, stdout, err = run_cli("ckpt", "validate", *args)
    assert code == 1, stdout + err
    return error_prefixed_lines(stdout + err)


@pytest.fixture
def step(tmp_path) -> Path:
    shutil.copytree(RUN, tmp_path / "run")
    return tmp_path / "run" / STEP


@pytest.mark.parametrize("deep", [False, True], ids=["cheap", "deep"])
def test_a_data_file_linked_out_is_one_error_line(step, tmp_path, deep):
    shard = step / "dist_ckpt" / "__0_1.distcp"
    outside = tmp_path / "outside.distcp"
    shutil.move(shard, outside)
    shard.symlink_to(outside)
    errors = _errors(step, *(["--deep"] if deep else []))
    about_file = [line for line in errors if f"{shard}:" in line]
    assert len(about_file) == 1 and "outside the checkpoint" in about_file[0], errors
    assert sum("outside the checkpoint" in line for line in errors) == 1, errors
    if not deep:
        assert errors == about_file


def test_a_data_file_cut_short_is_one_error_line(step):
    shard = max((step / "dist_ckpt").glob("*.distcp"), key=os.path.getsize)
    os.truncate(shard, shard.stat().st_size - 100)
    errors = _errors(step)
    assert len(errors) == 1 and "(truncated)" in errors[0], errors
