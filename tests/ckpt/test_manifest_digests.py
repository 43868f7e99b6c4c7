"""The manifest's per-file digests: new saves record xxh3_128 (xxhash over the bytes on
disk); manifests written before record sha256 and still validate, and catch a flipped byte,
as before; a file record with no, two or an unknown digest field is one line, exit 1."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
import xxhash
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.check.report import NO_HF_CONFIG
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.file_hash import FileRecord, hash_file, rehash_like
from mfsdp_ckpt.format.manifest import FORMAT_VERSION, ManifestError, read_manifest
from tests.support.ckpt_edits import biggest_shard
from tests.support.paths import FIXTURES

OLD_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # committed with sha256 records


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("digests")
    Checkpointer(root, strategy="none", io_threads=2).save(
        3, {"model": {"w": torch.randn(128, 64)}, "extra": {"step": 3}}, contents=("model", "extra")
    )
    return root


@pytest.fixture
def run(saved, tmp_path) -> Path:
    return shutil.copytree(saved, tmp_path / "run")


def _flip_a_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))


def _validate(path: Path, *flags: str):
    return CliRunner().invoke(app, ["ckpt", "validate", str(path), *flags])


def test_a_new_save_records_xxh3_of_every_file(saved):
    step = layout.step_dir(saved, 3)
    data = json.loads((step / layout.MANIFEST_FILE).read_text())
    assert data["format_version"] == FORMAT_VERSION == 2
    written = sorted(
        p.relative_to(step).as_posix()
        for p in step.rglob("*")
        if p.is_file() and p.name != layout.MANIFEST_FILE
    )
    assert sorted(data["files"]) == written
    for name, record in data["files"].items():
        raw = (step / name).read_bytes()
        assert record == {"size": len(raw), "xxh3_128": xxhash.xxh3_128(raw).hexdigest()}, name


def test_a_flipped_byte_under_xxh3_is_caught_by_deep(run):
    shard = biggest_shard(layout.step_dir(run, 3))
    report = validate_checkpoint(run, deep=True)  # whole; saved without huggingface/
    assert report.ok() and [f.message for f in report.findings] == [NO_HF_CONFIG]
    _flip_a_byte(shard)
    assert validate_checkpoint(run).ok()  # same size: only the digest can tell
    result = _validate(run, "--deep")
    assert result.exit_code == 1, result.output
    assert f"error: {shard}: xxh3_128 differs from the manifest (bytes changed after save)" in (
        result.output
    )


def test_deep_says_which_digest_it_checked(run):
    result = _validate(run, "--deep")
    assert result.exit_code == 0, result.output
    assert "deep, xxh3_128 checked)" in result.output.splitlines()[-1]
    report = json.loads(_validate(run, "--deep", "--json").output)
    assert report["hash_algorithms"] == ["xxh3_128"] and report["valid"]
    assert json.loads(_validate(run, "--json").output)["hash_algorithms"] == []
    inspected = CliRunner().invoke(app, ["ckpt", "inspect", str(run), "--json"])
    assert json.loads(inspected.output)["file_digests"] == ["xxh3_128"]


def test_an_old_sha256_manifest_validates_and_catches_a_flipped_byte(tmp_path):
    """The committed fixture is a checkpoint on disk from before xxh3: it reads and validates
    as before, and a flipped byte gets the same message it always got."""
    manifest = json.loads((OLD_RUN / "global_step_2" / layout.MANIFEST_FILE).read_text())
    assert manifest["format_version"] == 1
    assert {tuple(sorted(r)) for r in manifest["files"].values()} == {("sha256", "size")}
    result = _validate(OLD_RUN, "--deep", "--strict")
    assert result.exit_code == 0, result.output
    assert "deep, sha256 checked)" in result.output.splitlines()[-1]

    run = shutil.copytree(OLD_RUN, tmp_path / "run")
    shard = biggest_shard(layout.step_dir(run, 2))
    _flip_a_byte(shard)
    result = _validate(run, "--deep")
    assert result.exit_code == 1, result.output
    assert f"error: {shard}: sha256 differs from the manifest (bytes changed after save)" in (
        result.output
    )


BAD_RECORDS = [
    ({"size": 1}, "has no digest: needs exactly one of xxh3_128 or sha256"),
    (
        {"size": 1, "sha256": "0" * 64, "xxh3_128": "0" * 32},
        "has 2 digests (xxh3_128, sha256): needs exactly one of xxh3_128 or sha256",
    ),
    (  # edited without its digest of itself resealed: damage, not a newer mfsdp's record
        {"size": 1, "blake3": "0" * 64},
        "has field 'blake3', unknown to this mfsdp, whose digests are xxh3_128 or sha256, and"
        " its fields differ from its manifest_digest (changed after it was written: damaged or"
        " edited)",
    ),
    ({"size": 1, "xxh3_128": "0" * 64}, "field 'xxh3_128' is not 32 hex digits"),
    ({"size": 1, "sha256": "0" * 32}, "field 'sha256' is not 64 hex digits"),
    ({"sha256": "0" * 64}, "needs a size (a count of bytes)"),
]


@pytest.mark.parametrize(("record", "why"), BAD_RECORDS)
def test_a_bad_file_record_is_one_line_and_exit_1(run, record, why):
    path = layout.step_dir(run, 3) / layout.MANIFEST_FILE
    data = json.loads(path.read_text())
    name = sorted(data["files"])[0]
    data["files"][name] = record
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError) as raised:
        read_manifest(path)
    assert str(raised.value) == f"{path}: file record for {name!r} {why}"
    result = _validate(run)
    assert result.exit_code == 1, result.output
    assert f"error: {path}: file record for {name!r} {why}" in result.output.splitlines()
    inspected = CliRunner().invoke(app, ["ckpt", "inspect", str(run)])
    assert inspected.exit_code == 1 and len(inspected.output.strip().splitlines()) == 1


def test_each_file_is_rehashed_with_the_algorithm_its_record_names(tmp_path):
    (tmp_path / "a").write_bytes(b"a" * 100_000)
    (tmp_path / "b").write_bytes(b"b" * 10)
    old = FileRecord(10, hashlib.sha256(b"b" * 10).hexdigest(), "sha256")
    new = hash_file(tmp_path / "a", tmp_path)
    assert new == FileRecord(100_000, xxhash.xxh3_128(b"a" * 100_000).hexdigest(), "xxh3_128")
    assert rehash_like(tmp_path, {"a": new, "b": old}) == {"a": new, "b": old}
    assert hash_file(tmp_path / "b", algorithm="sha256") == old
