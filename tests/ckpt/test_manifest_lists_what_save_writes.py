"""A manifest of ours lists the files every mfsdp save writes whose bytes decide what the
step means (`check/manifest_coverage.py`): `dist_ckpt/.metadata` and huggingface/config.json.
One that leaves such a file out while it is there was rewritten after the save, and is
refused by validate, export-hf and a resume, naming the file; other files it does not list
stay "unknown file" warnings.

Was: .metadata with layer 0's k_proj and v_proj storage entries swapped, dropped from a
resealed manifest, was an "unknown file" warning; validate --deep said "valid ... xxh3_128
checked", export-hf --verify wrote k_proj's bytes as v_proj and a resume trained from it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.check.manifest_coverage import ALWAYS_WRITTEN, UNLISTED
from mfsdp_ckpt.check.report import ERROR, WARNING
from mfsdp_ckpt.check.validate import CheckpointInvalidError, validate_checkpoint
from mfsdp_ckpt.checkpointer import Checkpointer, load_checkpoint
from mfsdp_ckpt.format import checkpoint_resolution
from tests.support.ckpt_edits import edit_manifest
from tests.support.cli_errors import one_error
from tests.support.fsdp_workloads import build
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES
from trainer.state import ModelState

LEFT_OUT = sorted(ALWAYS_WRITTEN)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A run dir of one step, saved by mfsdp's Checkpointer with its config in huggingface/."""
    run = tmp_path_factory.mktemp("saved") / "run"
    model, _optimizer = build(sharded=False)
    Checkpointer(run, strategy="none").save(
        1,
        {"model": ModelState(model)},
        contents=("model",),
        hf_assets=model.config.save_pretrained,
    )
    return run


def _dropped(run: Path, tmp_path: Path, name: str) -> Path:
    """A copy of `run` whose step's manifest no longer lists `name`, its digest resealed."""
    copy = shutil.copytree(run, tmp_path / "run")
    (step,) = copy.glob("global_step_*")
    edit_manifest(step, lambda data: data["files"].pop(name))
    return step


def test_a_fresh_save_lists_every_file_it_writes(saved):
    report = validate_checkpoint(saved, deep=True)
    assert report.ok() and not report.findings, report.findings
    assert report.hash_algorithms == ["xxh3_128"]


@pytest.mark.parametrize("name", LEFT_OUT)
def test_a_manifest_that_leaves_out_a_file_our_save_lists_is_refused(saved, tmp_path, name):
    step = _dropped(saved, tmp_path, name)
    report = validate_checkpoint(step, deep=True)
    errors = [(f.where, f.message) for f in report.findings if f.severity == ERROR]
    assert errors == [(str(step / name), UNLISTED)]
    assert not [f for f in report.findings if "unknown file" in f.message]
    assert report.hash_algorithms == []  # the verdict says no "xxh3_128 checked"
    code, out, err = run_cli("ckpt", "validate", step, "--deep")
    assert code == 1 and "INVALID" in out + err and "checked)" not in out + err, out + err
    code, _out, err = run_cli("ckpt", "export-hf", step, "--out", tmp_path / "out")
    assert code == 1, err
    one_error(err, f"{step / name}: {UNLISTED}")
    assert not (tmp_path / "out").exists()
    fresh, _optimizer = build(sharded=False)
    with pytest.raises(CheckpointInvalidError, match=UNLISTED):  # a resume's load
        load_checkpoint(
            checkpoint_resolution.resolve_checkpoint(step),
            {"model": ModelState(fresh)},
            contents=("model",),
        )


def test_an_older_format_version_is_held_to_the_same_list(tmp_path):
    """format_version 1 (sha256) hashed .metadata and huggingface/ as every version has."""
    run = FIXTURES / "megatron_fsdp_qwen2" / "run"
    assert validate_checkpoint(run).ok()
    step = _dropped(run, tmp_path, "dist_ckpt/.metadata")
    errors = [f for f in validate_checkpoint(step).findings if f.severity == ERROR]
    assert [(f.where, f.message) for f in errors] == [(str(step / "dist_ckpt/.metadata"), UNLISTED)]


def test_files_our_save_never_writes_stay_warnings(saved, tmp_path):
    run = shutil.copytree(saved, tmp_path / "run")
    (step,) = run.glob("global_step_*")
    (step / "huggingface" / "notes.txt").write_text("mine")
    (step / "huggingface" / "tokenizer.json").write_text("{}")  # which ones: the tokenizer's
    (step / "dist_ckpt" / "__7_0.distcp").write_bytes(b"x")  # no .metadata names it
    report = validate_checkpoint(run)
    assert report.ok(), report.findings
    assert sorted((f.severity, f.where) for f in report.findings) == [
        (WARNING, str(step / "dist_ckpt" / "__7_0.distcp")),
        (WARNING, str(step / "huggingface" / "notes.txt")),
        (WARNING, str(step / "huggingface" / "tokenizer.json")),
    ]
