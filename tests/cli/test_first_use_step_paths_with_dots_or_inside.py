"""A checkpoint path spelt with `.` or `..`: `mfsdp ckpt validate .` from inside a step dir,
or `global_step_80/dist_ckpt/..`. The layout is told by directory names, which `.` and `..`
are not, so a step of ours read as a bare dist_ckpt: no step, no manifest ("file hashes were
not checked"), and `--strict` failed a checkpoint that was whole. And a directory inside a
step (its `huggingface/`) given for the step: the error now names the step to give."""

from __future__ import annotations

import os
import shutil

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.format import checkpoint_resolution, layout
from tests.support.paths import FIXTURES

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"


@pytest.mark.parametrize(
    "inside, given",
    [
        ("global_step_2", "."),
        ("global_step_2/dist_ckpt", "."),
        ("global_step_2/dist_ckpt", ".."),
        ("global_step_2/huggingface", "../dist_ckpt/.."),
        (".", "global_step_2/dist_ckpt/.."),
        ("global_step_2", "../global_step_2/dist_ckpt/../."),
    ],
)
def test_a_step_given_with_dots_reads_as_the_step_it_names(tmp_path, monkeypatch, inside, given):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    monkeypatch.chdir(run / inside)
    paths = checkpoint_resolution.resolve_checkpoint(given)
    assert paths.kind == layout.MFSDP and paths.manifest is not None
    assert os.path.samefile(paths.step_dir, run / "global_step_2")
    done = CliRunner().invoke(app, ["ckpt", "validate", given, "--strict"])
    assert done.exit_code == 0, done.output
    assert "(mfsdp, step 2," in done.output and "no manifest" not in done.output


def test_a_dotdot_after_a_symlink_follows_the_link_as_the_kernel_does(tmp_path, monkeypatch):
    """`link/..` is the parent of the link's target, not the directory holding the link:
    the path is collapsed by name only where both name the same directory."""
    run = tmp_path / "elsewhere" / "run"
    shutil.copytree(RUN, run)
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "step").symlink_to(run / "global_step_2" / "dist_ckpt")
    monkeypatch.chdir(tmp_path / "here")
    paths = checkpoint_resolution.resolve_checkpoint("step/..")
    assert os.path.samefile(paths.step_dir, run / "global_step_2")
    assert paths.kind == layout.MFSDP


@pytest.mark.parametrize("command", [["inspect"], ["validate"], ["export-hf", "--out", "hf"]])
def test_a_directory_inside_a_step_names_the_step_to_give(tmp_path, monkeypatch, command):
    """`global_step_N/huggingface` (tab completion stops there) holds the config only: the
    error listed what it looked for and left the level to the user."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    monkeypatch.chdir(tmp_path)
    given = run / "global_step_2" / "huggingface"
    done = CliRunner().invoke(app, ["ckpt", command[0], str(given), *command[1:]])
    assert done.exit_code == 2
    assert done.output.startswith(f"error: {given}: not a checkpoint (looked for ")
    assert done.output.endswith(f"; it lies in the checkpoint {given.parent}: give that\n")
    elsewhere = tmp_path / "data"  # a directory in no checkpoint gets no such line
    elsewhere.mkdir()
    done = CliRunner().invoke(app, ["ckpt", "inspect", str(elsewhere)])
    assert done.exit_code == 2 and "it lies in" not in done.output
