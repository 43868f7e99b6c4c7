"""A manifest a newer mfsdp wrote (resealed with its digest of itself, as that writer would):
a newer `format_version`, a content kind or a file-record field this mfsdp does not know.
Each was refused as damage ("unknown contents ['rng']", exit 1). Now each says it was
written by a newer mfsdp and to upgrade, still exit 1 (nothing here can check it) in
validate, inspect and a resume; the same edit without the digest resealed is damage, as
before. A one-bit flip of format_version (2 to 3) with the digest this mfsdp checks not
matching said "upgrade mfsdp" too: it is damage. A step copied under a name that is no
step's (`best/`) says the same, exit 1 (test_a_step_copied_as_best_reads_its_manifest.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.manifest import ManifestError, NewerManifestError, read_manifest
from mfsdp_ckpt.format.manifest_digest import DIGEST_FIELD, sealed

STEP = 3
RECORD = "dist_ckpt/.metadata"  # a file every step lists


def _newer_version(data: dict) -> None:
    data["format_version"] += 1


def _newer_content(data: dict) -> None:
    data["contents"].append("rng")


def _newer_digest(data: dict) -> None:
    data["files"][RECORD]["blake3"] = "0" * 64


# each edit, and what the line says of it in "written by a newer mfsdp (...)"
NEWER: dict[str, tuple[Callable[[dict], None], str]] = {
    "format_version": (_newer_version, "format_version 3; this one reads up to 2"),
    "contents": (_newer_content, "contents ['rng']; this one knows model, optimizer, extra"),
    "file record": (
        _newer_digest,
        f"file record for {RECORD!r} has field 'blake3', unknown to this mfsdp, whose digests"
        " are xxh3_128 or sha256",
    ),
}


def _states() -> dict:
    return {"model": {"w": torch.randn(16, 8)}, "extra": {"step": STEP}}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("newer")
    Checkpointer(root, strategy="none", io_threads=2).save(
        STEP, _states(), contents=("model", "extra")
    )
    return root


def _edited(saved: Path, tmp_path: Path, edit: Callable[[dict], None], reseal: bool) -> Path:
    """A copy of the saved run whose manifest has `edit` made, resealed when `reseal`;
    returns the manifest's path."""
    run = shutil.copytree(saved, tmp_path / "run")
    path = layout.step_dir(run, STEP) / layout.MANIFEST_FILE
    data = json.loads(path.read_text())
    edit(data)
    if reseal:
        data = sealed({k: v for k, v in data.items() if k != DIGEST_FIELD})
    path.write_text(json.dumps(data))
    return path


def _ckpt(*args: str):
    return CliRunner().invoke(app, ["ckpt", *args])


@pytest.mark.parametrize("case", NEWER)
def test_a_newer_manifest_says_upgrade_in_every_reader(saved, tmp_path, case):
    edit, what = NEWER[case]
    path = _edited(saved, tmp_path, edit, reseal=True)
    line = f"{path}: written by a newer mfsdp ({what}): upgrade mfsdp to read it"
    with pytest.raises(NewerManifestError) as raised:
        read_manifest(path)
    assert str(raised.value) == line
    run = path.parent.parent
    for command in ("validate", "inspect"):
        result = _ckpt(command, str(run))
        assert result.exit_code == 1, result.output
        assert f"error: {line}" in result.output.splitlines(), result.output
    checkpointer = Checkpointer(run, strategy="none")
    found = checkpointer.find_resume("auto")
    assert found is not None and found.step == STEP
    with pytest.raises(MfsdpFailedError) as refused:
        checkpointer.load(found, _states(), contents=("model", "extra"))
    assert str(refused.value) == line


@pytest.mark.parametrize("case", ["contents", "file record"])
def test_the_same_edit_without_its_digest_resealed_is_damage(saved, tmp_path, case):
    edit, what = NEWER[case]
    path = _edited(saved, tmp_path, edit, reseal=False)
    with pytest.raises(ManifestError) as raised:
        read_manifest(path)
    assert not isinstance(raised.value, NewerManifestError)
    assert str(raised.value) == (
        f"{path}: {what}, and its fields differ from its {DIGEST_FIELD} (changed after it was"
        " written: damaged or edited)"
    )


def test_a_digest_of_itself_in_an_unknown_algorithm_says_upgrade(saved, tmp_path):
    def blake3_digest(data: dict) -> None:
        data[DIGEST_FIELD] = {"size": 1, "blake3": "0" * 64}

    path = _edited(saved, tmp_path, blake3_digest, reseal=False)
    with pytest.raises(NewerManifestError) as raised:
        read_manifest(path)
    assert str(raised.value) == (
        f"{path}: written by a newer mfsdp (field {DIGEST_FIELD!r} has field 'blake3', unknown"
        " to this mfsdp, whose digests are xxh3_128 or sha256): upgrade mfsdp to read it"
    )


def test_a_step_copied_as_best_says_upgrade(saved, tmp_path):
    path = _edited(saved, tmp_path, _newer_version, reseal=True)
    best = shutil.copytree(path.parent, tmp_path / "best")
    result = _ckpt("validate", str(best))
    assert result.exit_code == 1, result.output
    line = f"{best / layout.MANIFEST_FILE}: written by a newer mfsdp ({NEWER['format_version'][1]})"
    assert f"error: {line}: upgrade mfsdp to read it" in result.output.splitlines(), result.output


def test_a_flipped_format_version_is_damage_not_newer(saved, tmp_path):
    """Its digest, in an algorithm this mfsdp checks, does not match: the bit that turned 2
    into 3 is damage, and an upgrade would not read the step either."""
    path = _edited(saved, tmp_path, _newer_version, reseal=False)
    with pytest.raises(ManifestError) as raised:
        read_manifest(path)
    assert not isinstance(raised.value, NewerManifestError)
    assert str(raised.value) == (
        f"{path}: {NEWER['format_version'][1]}, and its fields differ from its {DIGEST_FIELD}"
        " (changed after it was written: damaged or edited)"
    )
    result = _ckpt("validate", str(path.parent.parent))
    assert result.exit_code == 1 and f"error: {raised.value}" in result.output, result.output


@pytest.mark.parametrize(
    "digest",
    [None, {"size": 1, "blake3": "0" * 64}, "another form"],
    ids=["none", "unknown algorithm", "another form"],
)
def test_a_newer_format_version_whose_digest_cannot_be_checked_says_upgrade(
    saved, tmp_path, digest
):
    """A newer format may write its digest of itself in a form this mfsdp cannot check, or
    none: nothing says damage, so it is newer."""

    def newer_digest(data: dict) -> None:
        _newer_version(data)
        data.pop(DIGEST_FIELD)
        if digest is not None:
            data[DIGEST_FIELD] = digest

    path = _edited(saved, tmp_path, newer_digest, reseal=False)
    with pytest.raises(NewerManifestError) as raised:
        read_manifest(path)
    assert str(raised.value) == (
        f"{path}: written by a newer mfsdp ({NEWER['format_version'][1]}): upgrade mfsdp to read it"
    )
