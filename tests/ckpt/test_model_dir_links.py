"""Symlinks in a Hugging Face model dir whose files are copied into an export or an import
(config, tokenizer): a link that leads out of the model dir is refused in one line with
nothing written, so a cloned model repo (git keeps symlinks) cannot copy a user's file
into what they publish; a Hugging Face cache snapshot, whose files link into ../../blobs/,
still works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfsdp_ckpt.storage import safe_files
from tests.reliability.hf_model import EXPORT_MCORE_QWEN2, MCORE_QWEN2, hf_model
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli

SECRET = "a user's private file"


def _link_out(model: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    (model / "tokenizer_config.json").symlink_to(secret)


def _holds_secret(directory: Path) -> bool:
    return any(SECRET.encode() in p.read_bytes() for p in directory.rglob("*") if p.is_file())


def test_export_refuses_an_asset_linked_out_of_its_hf_config_dir(tmp_path):
    model = hf_model(tmp_path)
    _link_out(model, tmp_path)
    out = tmp_path / "out"
    code, _out, err = run_cli(*EXPORT_MCORE_QWEN2, "--hf-config", model, "--out", out)
    assert code == 2, err  # --hf-config's files: the argument's fault, not the checkpoint's
    one_error(err, "tokenizer_config.json", "resolves outside the model dir")
    assert not out.exists()


def test_import_refuses_an_asset_linked_out_of_its_source(tmp_path):
    model = hf_model(tmp_path)
    _link_out(model, tmp_path)
    out = tmp_path / "imported"
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", out, "--layout", "hf")
    assert code == 1, err
    one_error(err, "tokenizer_config.json", "resolves outside the model dir")
    assert not out.exists() or not _holds_secret(out)


def test_a_cache_snapshot_linking_into_blobs_exports(tmp_path):
    """models--ORG--NAME/snapshots/REV/FILE -> ../../blobs/HASH, as the Hugging Face cache
    lays a download out."""
    cache = tmp_path / "models--org--name"
    snapshot, blobs = cache / "snapshots" / "0123abc", cache / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    files = {"config.json": (MCORE_QWEN2 / "config.json").read_text(), "tokenizer.json": "{}"}
    for index, (name, text) in enumerate(files.items()):
        (blobs / f"hash{index}").write_text(text)
        (snapshot / name).symlink_to(Path("..") / ".." / "blobs" / f"hash{index}")
    out = tmp_path / "out"
    code, _out, err = run_cli(*EXPORT_MCORE_QWEN2, "--hf-config", snapshot, "--out", out)
    assert code == 0, err
    assert (out / "tokenizer.json").read_text() == "{}"
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen2"


def test_model_dir_root_is_the_dir_or_its_cache_folder(tmp_path):
    plain = tmp_path / "model"
    snapshot = tmp_path / "models--o--n" / "snapshots" / "rev"
    for directory in (plain, snapshot, tmp_path / "models--o--n" / "blobs"):
        directory.mkdir(parents=True)
    assert safe_files.model_dir_root(plain) == str(plain.resolve())
    assert safe_files.model_dir_root(snapshot) == str((tmp_path / "models--o--n").resolve())
    inner = snapshot / "sub"  # a repo holding its model in a subfolder
    inner.mkdir()
    assert safe_files.model_dir_root(inner) == str((tmp_path / "models--o--n").resolve())


@pytest.mark.parametrize(
    "folders",
    [
        ("home", "snapshots", "step100"),  # any folder named snapshots
        ("models--o--n", "snapshots", "rev"),  # a cache's name, but no blobs/ beside
        ("cache", "snapshots", "rev"),  # blobs/ beside, not a models--ORG--NAME folder
    ],
)
def test_a_snapshots_folder_outside_a_real_cache_does_not_widen_the_root(tmp_path, folders):
    """`home/snapshots/step100/tokenizer.model -> ../../.ssh/id_rsa`: the private key was
    copied into the import and every export of it."""
    model = tmp_path.joinpath(*folders)
    model.mkdir(parents=True)
    if folders[0] == "cache":
        (tmp_path / "cache" / "blobs").mkdir()
    assert safe_files.model_dir_root(model) == str(model.resolve())
    secret = tmp_path / folders[0] / ".ssh" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    (model / "config.json").write_text((MCORE_QWEN2 / "config.json").read_text())
    (model / "tokenizer.model").symlink_to(Path("..") / ".." / ".ssh" / "id_rsa")
    out = tmp_path / "out"
    code, _out, err = run_cli(*EXPORT_MCORE_QWEN2, "--hf-config", model, "--out", out)
    assert code == 2, err  # --hf-config's files: the argument's fault, not the checkpoint's
    one_error(err, "tokenizer.model", "resolves outside the model dir")
    assert not out.exists() or not _holds_secret(out)


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_model_dir_named_through_a_link_tells_nothing_of_files_outside(tmp_path, target_exists):
    """A model dir named through a symlink is checked against its real folder: a link in it
    leading out was looked up outside, and one to a missing file there said "file is
    missing", which told whether a file out there exists. Both are "resolves outside"."""
    real = tmp_path / "real_model"
    real.mkdir()
    outside = tmp_path / "outside.json"
    if target_exists:
        outside.write_text("{}")
    (real / "tokenizer.json").symlink_to(outside)
    named = tmp_path / "named"
    named.symlink_to(real)
    root = safe_files.model_dir_root(named)
    with pytest.raises(safe_files.CheckpointFileError, match="resolves outside the model dir"):
        safe_files.regular_file(named / "tokenizer.json", root, "the model dir named")
