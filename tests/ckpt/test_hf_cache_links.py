"""A model dir downloaded with huggingface_hub's `--local-dir` before 0.23 holds links into
the Hugging Face cache (`DIR/FILE -> ~/.cache/huggingface/hub/models--ORG--NAME/blobs/HASH`):
each is read as the model's own file by import-hf and export-hf --hf-config (was: refused,
"resolves outside the model dir"); any other link out stays refused, in a line that names
where it leads and, for a near miss of the cache's shape, the rule it broke."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from tests.reliability.hf_model import EXPORT_MCORE_QWEN2, hf_model
from tests.support.cli_errors import one_error
from tests.support.hf_cache_dirs import local_dir_of_links
from tests.support.interop_layouts import run_cli

SECRET = "a user's private file"


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_import_reads_a_local_dir_of_links_into_the_cache(tmp_path, relative):
    local = local_dir_of_links(hf_model(tmp_path), tmp_path / "hub", relative)
    out = tmp_path / "imported"
    code, _out, err = run_cli("ckpt", "import-hf", local, "--out", out, "--layout", "hf")
    assert code == 0, err


def test_export_takes_its_hf_config_from_a_local_dir_of_links(tmp_path):
    local = local_dir_of_links(hf_model(tmp_path), tmp_path / "hub")
    out = tmp_path / "out"
    code, _out, err = run_cli(*EXPORT_MCORE_QWEN2, "--hf-config", local, "--out", out)
    assert code == 0, err
    assert json.loads((out / "tokenizer.json").read_text()) == {"mine": True}


def _link(local: Path, target: Path) -> Path:
    (local / "tokenizer_config.json").symlink_to(target)
    return local / "tokenizer_config.json"


def _secret(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SECRET)
    return path


def _blob_named(tmp_path: Path, folder: str, name: str = "a" * 64) -> Path:
    return _secret(tmp_path / folder / "blobs" / name)


def _blob_linking_out(tmp_path: Path) -> Path:
    """A blob-shaped name that is itself a link to a user's file."""
    blob = tmp_path / "hub" / "models--org--tiny" / "blobs" / ("b" * 40)
    blob.symlink_to(_secret(tmp_path / "secret.txt"))
    return blob


def _blob_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "hub" / "models--org--tiny" / "blobs" / ("c" * 64)
    folder.mkdir()
    (folder / "x").write_text(SECRET)
    return folder


LINKS_OUT = {  # a link out that is no blob of the cache: (what it leads to, cache rule named)
    "plain-file": (lambda tmp: _secret(tmp / "notes.txt"), False),
    "not-a-hash": (lambda tmp: _blob_named(tmp, "hub/models--org--tiny", "notes.txt"), True),
    "short-hash": (lambda tmp: _blob_named(tmp, "hub/models--org--tiny", "a" * 39), True),
    "not-models--": (lambda tmp: _blob_named(tmp, "hub/datasets--org--tiny"), True),
    "blob-links-out": (_blob_linking_out, True),
    "blob-is-a-folder": (_blob_folder, True),
}


@pytest.mark.parametrize("case", list(LINKS_OUT))
def test_any_other_link_out_stays_refused_naming_its_target(tmp_path, case):
    local = local_dir_of_links(hf_model(tmp_path), tmp_path / "hub")
    leads_to, cache_rule = LINKS_OUT[case]
    target = leads_to(tmp_path)
    link = _link(local, target)
    with pytest.raises(CheckpointFileError) as caught:
        safe_files.regular_file(link, safe_files.model_dir_root(local), "the model dir")
    line = str(caught.value)
    assert line.startswith(f"{link}: resolves outside the model dir"), line
    assert f"({target})" in line, line  # the link's own text
    assert ("Hugging Face cache" in line) == cache_rule, line
    assert SECRET not in line


def test_export_names_the_target_of_a_link_out_of_the_model_dir(tmp_path):
    local = local_dir_of_links(hf_model(tmp_path), tmp_path / "hub")
    target = _blob_named(tmp_path, "hub/models--org--tiny", "notes.txt")
    _link(local, target)
    out = tmp_path / "out"
    code, _out, err = run_cli(*EXPORT_MCORE_QWEN2, "--hf-config", local, "--out", out)
    assert code == 2, err  # --hf-config's files: the argument's fault, not the checkpoint's
    one_error(err, "tokenizer_config.json: resolves outside the model dir", f"({target})")
    assert not out.exists()


def test_a_checkpoint_still_refuses_a_link_into_the_cache(tmp_path):
    """A checkpoint being read never reads outside it, a blob of the cache included."""
    local = local_dir_of_links(hf_model(tmp_path), tmp_path / "hub")
    with pytest.raises(CheckpointFileError, match="resolves outside the checkpoint"):
        safe_files.read_bytes(local / "config.json", 1 << 20, local)
