"""A manifest's fields that disagree with the files beside it, or are not of their JSON type,
are refused as the manifest is read (by validate, inspect, export and a resume alike): a
re-sealed manifest saying world_size 2 over one rank's files, or `info.run` 5 (which decides
the kind of run that resumes it), `info.cpu_threads` "x" or `info.total_steps` "4", passed
every reader."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.manifest import ManifestError, read_manifest
from tests.support.ckpt_edits import edit_manifest

STEP = 1


@pytest.fixture
def step(tmp_path) -> Path:
    """A one-rank step whose manifest records a training run's info."""
    Checkpointer(tmp_path, strategy="none").save(
        STEP,
        {"model": {"w": torch.ones(4, 4)}},
        contents=("model",),
        info={"run": "sft", "cpu_threads": [2], "total_steps": 4, "train_loss": 1.5},
    )
    return layout.step_dir(tmp_path, STEP)


def _refused(step: Path, edit, why: str) -> None:
    edit_manifest(step, edit)
    with pytest.raises(ManifestError) as caught:
        read_manifest(step / layout.MANIFEST_FILE)
    assert str(caught.value) == f"{step / layout.MANIFEST_FILE}: {why}"


def test_a_manifest_as_saved_is_read(step):
    manifest = read_manifest(step / layout.MANIFEST_FILE)
    assert manifest.world_size == 1 and manifest.info["cpu_threads"] == [2]


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("run", 5, "str"),
        ("total_steps", "4", "int"),
        ("total_steps", True, "int"),
        ("cpu_threads", "x", "list"),
        ("train_loss", "low", "int or float or NoneType"),
    ],
)
def test_an_info_field_of_another_type_is_refused(step, key, value, kind):
    _refused(step, lambda m: m["info"].update({key: value}), f"field 'info.{key}' is not {kind}")


def test_a_thread_count_that_is_no_count_is_refused(step):
    why = "field 'info.cpu_threads' holds a count that is no int > 0"
    _refused(step, lambda m: m["info"].update(cpu_threads=[0]), why)


def test_another_fields_info_is_its_writers(step):
    edit_manifest(step, lambda m: m["info"].update(tokens_seen="many"))
    assert read_manifest(step / layout.MANIFEST_FILE).info["tokens_seen"] == "many"


def test_a_world_size_over_the_files_of_fewer_ranks_is_refused(step):
    why = "world_size is 2, but it lists no dist_ckpt file of rank 1 (files of 1 rank(s))"
    _refused(step, lambda m: m.update(world_size=2), why)


def test_a_file_of_a_rank_past_the_world_size_is_refused(step):
    def edit(m: dict) -> None:
        m["files"]["dist_ckpt/__1_0.distcp"] = m["files"]["dist_ckpt/__0_0.distcp"]

    _refused(step, edit, "lists dist_ckpt files of rank 1, but world_size is 1")
