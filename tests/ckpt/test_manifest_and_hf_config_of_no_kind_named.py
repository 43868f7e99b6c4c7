"""A manifest, --hf-config or model dir that is there but is no regular file (or no
directory) is named with what it is.

A tracked step whose manifest.json was a FIFO, a directory or a link to /dev/zero made
`validate RUN` say the tracker "names step 2, which is missing or incomplete" (and resume
say the step "holds no manifest.json"), sending the user after a file that is there; given
the step dir itself, the manifest was named. `export-hf --hf-config FIFO` said "cannot
list (Not a directory)", and `import-hf FIFO` called it "a file" of a model dir; `validate
--hf-config /dev/zero` said "a character device, not a regular file", as all now say. A
step whose manifest is missing (a save stopped before writing it) reads as before.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout, run_steps
from mfsdp_ckpt.format.file_walk import list_files
from tests.support.interop_layouts import one_error_line, run_cli

STATE = {"model": {"w": torch.ones(2)}}


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()


def _link_to_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


MANIFEST_KINDS: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (_fifo, "a FIFO"),
    "directory": (_directory, "a directory"),
    "link-to-dev-zero": (_link_to_dev_zero, "a character device"),
}


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> Path:
    """A run dir with complete steps 1 and 2, the tracker naming step 2."""
    run = tmp_path_factory.mktemp("manifest_kinds") / "run"
    saver = Checkpointer(run, strategy="none")
    for step in (1, 2):
        saver.save(step, STATE, contents=("model",))
    return run


def _run_whose_step_2_manifest_is(saved_run: Path, tmp_path: Path, make) -> Path:
    run = tmp_path / "run"
    shutil.copytree(saved_run, run, symlinks=True)
    manifest = layout.step_dir(run, 2) / layout.MANIFEST_FILE
    manifest.unlink()
    if make is not None:
        make(manifest)
    return run


def _tracker_findings(run: Path) -> list[str]:
    report = validate_checkpoint(run)
    return [f.message for f in report.findings if Path(f.where) == run / layout.TRACKER_FILE]


@pytest.mark.parametrize("kind", MANIFEST_KINDS)
def test_validate_names_the_tracked_steps_manifest_and_what_it_is(saved_run, tmp_path, kind):
    make, what = MANIFEST_KINDS[kind]
    run = _run_whose_step_2_manifest_is(saved_run, tmp_path, make)
    manifest = layout.step_dir(run, 2) / layout.MANIFEST_FILE
    assert _tracker_findings(run) == [f"names step 2, but {manifest} is {what}, not a regular file"]


def test_a_tracked_step_without_a_manifest_reads_as_before(saved_run, tmp_path):
    run = _run_whose_step_2_manifest_is(saved_run, tmp_path, None)
    assert _tracker_findings(run) == ["names step 2, which is missing or incomplete"]


@pytest.mark.parametrize("kind", MANIFEST_KINDS)
def test_resume_names_what_the_tracked_steps_manifest_is(saved_run, tmp_path, kind):
    make, what = MANIFEST_KINDS[kind]
    run = _run_whose_step_2_manifest_is(saved_run, tmp_path, make)
    with pytest.raises(layout.DamagedRunDirError) as caught:
        run_steps.resume_step(run)
    assert str(caught.value).startswith(
        f"{run / layout.TRACKER_FILE}: names step 2, but {layout.step_dir(run, 2)} holds a"
        f" manifest.json that is {what}, not a regular file; move it away to resume from step 1"
    ), caught.value


def _fifo_and_null(tmp_path: Path) -> list[tuple[Path, str]]:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    null = tmp_path / "null.json"
    null.symlink_to("/dev/null")
    return [(fifo, "a FIFO"), (null, "a character device")]


def test_export_hf_names_an_hf_config_of_no_kind(saved_run, tmp_path):
    for given, what in _fifo_and_null(tmp_path):
        out = tmp_path / "out"
        code, _, err = run_cli("ckpt", "export-hf", saved_run, "--hf-config", given, "--out", out)
        line = one_error_line(err)
        assert (code, line) == (2, f"error: --hf-config {given}: {what}, not a regular file")
        assert not out.exists()


def test_import_hf_names_a_model_dir_of_no_kind(tmp_path):
    for given, what in _fifo_and_null(tmp_path):
        out = tmp_path / "out"
        code, _, err = run_cli("ckpt", "import-hf", given, "--out", out)
        assert (code, one_error_line(err)) == (2, f"error: {given}: {what}, not a directory")
        assert not out.exists()


def test_a_file_listed_as_a_dir_is_named_with_what_it_is(tmp_path):
    for given, what in _fifo_and_null(tmp_path):
        with pytest.raises(layout.CheckpointPathError) as caught:
            list_files(given)
        assert str(caught.value) == f"{given}: {what}, not a directory"


@pytest.mark.parametrize("kind", MANIFEST_KINDS)
def test_inspect_of_the_run_names_what_the_tracked_steps_manifest_is(saved_run, tmp_path, kind):
    """`inspect RUN` and `export-hf RUN` resolve the run dir (checkpoint_resolution), which
    said the tracked step "is missing or incomplete"."""
    make, what = MANIFEST_KINDS[kind]
    run = _run_whose_step_2_manifest_is(saved_run, tmp_path, make)
    manifest = layout.step_dir(run, 2) / layout.MANIFEST_FILE
    code, _, err = run_cli("ckpt", "inspect", run)
    assert code == 1
    assert one_error_line(err).startswith(
        f"error: {run / layout.TRACKER_FILE}: names step 2, but {manifest} is {what},"
        " not a regular file"
    )


def test_export_hf_says_a_dangling_hf_config_link_as_a_missing_path(saved_run, tmp_path):
    """A link to nothing is a path that is not there, named with the directory relative
    paths are read from; the check for FIFOs and devices took it for a missing file."""
    dangling = tmp_path / "cfg"
    dangling.symlink_to(tmp_path / "nonexistent")
    out = tmp_path / "out"
    code, _, err = run_cli("ckpt", "export-hf", saved_run, "--hf-config", dangling, "--out", out)
    line = one_error_line(err)
    assert code == 2 and line.startswith(
        f"error: --hf-config {dangling}: no such file or directory"
    ), line
