"""`import-hf --overwrite` replaces an empty dir or an earlier import of the same layout,
never anything else.

It went through export's rule (empty, or config.json with safetensors: "an earlier
export"), so the one non-empty directory it replaced was a Hugging Face model dir (a
download given as --out by a slip), deleted for a DCP dir, while its own earlier import
was refused as "a checkpoint".
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.hf_model_files import saved_hf_model
from tests.support.interop_layouts import one_error_line, run_cli


def _tree(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _import(source: Path, out: Path, layout_name: str, *more: str) -> tuple[int, str]:
    code, _stdout, stderr = run_cli(
        "ckpt", "import-hf", source, "--out", out, "--layout", layout_name, *more
    )
    return code, stderr


@pytest.fixture
def models(tmp_path) -> tuple[Path, Path]:
    """An untied and a tied model: two imports of them differ in their weights."""
    return saved_hf_model(tmp_path / "a", "qwen2", tied=False), saved_hf_model(
        tmp_path / "b", "qwen2", tied=True
    )


@pytest.mark.parametrize("layout_name", ["mcore", "hf"])
def test_an_earlier_import_of_the_layout_is_replaced(tmp_path, models, layout_name):
    first, second = models
    out = tmp_path / "imported"
    assert _import(first, out, layout_name)[0] == 0
    before = _tree(out)
    code, err = _import(second, out, layout_name)
    assert code == 2 and "already exists (pass --overwrite" in one_error_line(err), err
    code, err = _import(second, out, layout_name, "--overwrite")
    assert code == 0, err
    fresh = tmp_path / "fresh"
    assert _import(second, fresh, layout_name)[0] == 0
    after = _tree(out)
    assert after != before
    assert set(after) == set(_tree(fresh))
    dcp = out if layout_name == "mcore" else out / "global_step_0" / "dist_ckpt"
    assert CheckpointReader(dcp).tensors


@pytest.mark.parametrize("layout_name", ["mcore", "hf"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_hugging_face_model_dir_is_never_replaced(tmp_path, models, layout_name, overwrite):
    source, other = models
    before = _tree(other)
    code, err = _import(source, other, layout_name, *(["--overwrite"] if overwrite else []))
    assert code == 2, err
    line = one_error_line(err)
    assert "holds a Hugging Face model (config.json and safetensors)" in line, line
    assert f"neither empty nor an earlier import-hf --layout {layout_name}" in line, line
    assert _tree(other) == before


@pytest.mark.parametrize("layout_name", ["mcore", "hf"])
def test_an_import_of_the_other_layout_is_not_replaced(tmp_path, models, layout_name):
    source, _ = models
    other_layout = "hf" if layout_name == "mcore" else "mcore"
    out = tmp_path / "imported"
    assert _import(source, out, other_layout)[0] == 0
    before = _tree(out)
    code, err = _import(source, out, layout_name, "--overwrite")
    assert code == 2, err
    assert f"holds an earlier import of --layout {other_layout}" in one_error_line(err), err
    assert _tree(out) == before


@pytest.mark.parametrize("layout_name", ["mcore", "hf"])
def test_an_import_with_more_in_it_is_not_replaced(tmp_path, models, layout_name):
    """A file added to an import (notes, a step trained from it) is someone's data."""
    source, _ = models
    out = tmp_path / "imported"
    assert _import(source, out, layout_name)[0] == 0
    inner = out if layout_name == "mcore" else out / "global_step_0" / "dist_ckpt"
    (inner / "notes.txt").write_text("mine")
    before = _tree(out)
    code, err = _import(source, out, layout_name, "--overwrite")
    assert code == 2, err
    assert "neither empty nor an earlier import-hf" in one_error_line(err), err
    assert _tree(out) == before


@pytest.mark.parametrize("layout_name, added", [("hf", "global_step_1"), ("mcore", "iter_0000010")])
def test_a_step_added_to_an_import_is_named_as_why(tmp_path, models, layout_name, added):
    """Trained from (a later step) or saved into by Megatron-LM: the line named the import's
    own global_step_0 or .metadata, as if the import itself were refused."""
    source, _ = models
    out = tmp_path / "imported"
    assert _import(source, out, layout_name)[0] == 0
    (out / added).mkdir()
    (out / "latest_checkpointed_iteration.txt").write_text(added[-2:])
    code, err = _import(source, out, layout_name, "--overwrite")
    assert code == 2, err
    assert f"holds a checkpoint ({added})" in one_error_line(err), err


def test_a_megatron_checkpoint_is_not_taken_for_an_mcore_import(tmp_path, models):
    """A DCP dir with an mcore import's very entries, but `args` recording a run (an
    import writes None there: no training run does) is a training checkpoint."""
    import torch.distributed.checkpoint as dcp

    source, _ = models
    run = tmp_path / "iter_0000005"
    state = {
        "args": argparse.Namespace(num_layers=2, hidden_size=8),
        "checkpoint_version": 3.0,
        "iteration": 5,
        "model.module.decoder.final_layernorm.weight": torch.ones(8),
    }
    dcp.save(state, checkpoint_id=str(run), no_dist=True)
    assert {entry.name for entry in os.scandir(run)} <= {".metadata", "__0_0.distcp"}
    before = _tree(run)
    code, err = _import(source, run, "mcore", "--overwrite")
    assert code == 2, err
    assert "holds a checkpoint (.metadata)" in one_error_line(err), err
    assert _tree(run) == before


def test_an_empty_dir_is_still_replaced(tmp_path, models):
    source, _ = models
    out = tmp_path / "empty"
    out.mkdir()
    code, err = _import(source, out, "mcore", "--overwrite")
    assert code == 0, err
    assert sorted(os.listdir(out))[0] == ".metadata"
