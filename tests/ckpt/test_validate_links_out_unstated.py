"""A checkpoint's findings never state anything about a file outside it.

validate compared each file the manifest lists with its recorded size through a plain
`os.stat`: a listed symlink to a file outside the checkpoint gave "has 9 bytes, manifest
says 1000", the size of that file. The link is now refused by name, as the deep read
refuses it ("resolves outside the checkpoint"), and nothing outside is looked at; links
that stay inside resolve as before (`mfsdp_ckpt/storage/confined_stat.py`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import dir_entries, layout
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.confined_stat import confined_stat
from tests.support.ckpt_edits import edit_manifest
from tests.support.interop_layouts import run_cli

OUTSIDE = "resolves outside the checkpoint"


@pytest.fixture
def step(tmp_path) -> Path:
    run = tmp_path / "run"
    state = {"model": {"w": torch.ones(4)}}
    Checkpointer(run, strategy="none").save(1, state, contents=("model",))
    return layout.step_dir(run, 1)


@pytest.fixture
def outside(tmp_path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "notes.txt").write_text("secret!!\n")  # 9 bytes
    return folder


def _list(step: Path, name: str, size: int = 1000) -> None:
    """The manifest lists `name` with `size` bytes, re-sealed as a writer would seal it."""
    edit_manifest(step, lambda m: m["files"].update({name: {"size": size, "xxh3_128": "0" * 32}}))


def _watched(monkeypatch, folder: Path) -> list[str]:
    """The paths under `folder` that os.stat, os.lstat or os.open are called on."""
    touched: list[str] = []
    real = os.path.realpath(folder)
    for name in ("stat", "lstat", "open"):
        original = getattr(os, name)

        def watching(path, *args, _original=original, **kwargs):
            if isinstance(path, str | os.PathLike) and os.fspath(path).startswith(real):
                touched.append(os.fspath(path))
            return _original(path, *args, **kwargs)

        monkeypatch.setattr(os, name, watching)
    return touched


@pytest.mark.parametrize("deep", [False, True], ids=["cheap", "deep"])
@pytest.mark.parametrize("target", ["notes.txt", "absent.txt"], ids=["file", "no-file"])
@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_a_listed_link_out_is_refused_without_looking_outside(
    step, outside, monkeypatch, deep, target, relative
):
    """Was "has 9 bytes, manifest says 1000" (cheap), or "listed in the manifest but
    missing" for a target that is not there: the size and the existence of outside files."""
    (step / "h").symlink_to(
        os.path.relpath(outside / target, step) if relative else outside / target
    )
    _list(step, "h")
    touched = _watched(monkeypatch, outside)
    code, out, err = run_cli("ckpt", "validate", step, *(["--deep"] if deep else []))
    assert code == 1
    assert f"error: {step / 'h'}: {OUTSIDE} ({outside / target})" in out + err
    assert "bytes" not in out + err and "missing" not in out + err
    assert (out + err).count(OUTSIDE) == 1
    assert touched == []


def test_links_inside_the_checkpoint_resolve_as_before(step):
    data = step / "dist_ckpt" / "__0_0.distcp"
    (step / "sub").mkdir()
    (step / "sub" / "rel").symlink_to("../dist_ckpt/__0_0.distcp")
    (step / "sub" / "abs").symlink_to(data)
    (step / "dir").symlink_to("dist_ckpt", target_is_directory=True)
    for name in ("sub/rel", "sub/abs", "dir/__0_0.distcp", "sub/../dist_ckpt/__0_0.distcp"):
        found = confined_stat(step / name, step)
        assert found is not None and found.st_size == data.stat().st_size, name
    found = confined_stat(step / "sub" / "rel", step, follow_symlinks=False)
    assert found is not None and stat.S_ISLNK(found.st_mode)


def test_what_is_not_there_is_none(step):
    (step / "loop").symlink_to("loop")
    (step / "file").write_text("x")
    for name in ("nothing", "loop", "file/below", "file/..", "dist_ckpt/nothing/x"):
        assert confined_stat(step / name, step) is None, name


def test_a_link_out_on_the_way_is_refused_unfollowed_too(step, outside):
    """A directory on the way that leads out: lstat of the last name alone would stat
    inside the outside directory (config_checks' `huggingface/config.json`)."""
    (outside / "config.json").write_text("{}")
    (step / "huggingface").symlink_to(outside, target_is_directory=True)
    (step / "up").symlink_to("../..", target_is_directory=True)
    for name in ("huggingface/config.json", "up/outside/notes.txt", "../outside/notes.txt"):
        with pytest.raises(CheckpointFileError, match=OUTSIDE):
            confined_stat(step / name, step, follow_symlinks=False)
    with pytest.raises(CheckpointFileError, match=OUTSIDE):
        dir_entries.stat_inside(step / "huggingface" / "config.json", step, follow_symlinks=False)
