"""export-hf --verify checks the export as a loader reads it, and says a damaged file once.

The export is written into a hidden work dir, verified there, then published. Each case
damages the work dir's files after the writer is done and before the real verify reads
them (a faulty disk or a writer bug, what --verify exists to catch):

* a damaged single-file export said "26 tensors missing from the export", the reason
  (truncated, bad header, FIFO, symlink, deleted) in a 27th line nothing showed;
* a sharded export without its index passed and was published: neither transformers nor
  import-hf loads one;
* a tensor in a shard that the index does not list passed (transformers: unexpected);
* a damaged index named the hidden work dir, gone by then, in a line without `verify:`;
* a symlink said "resolves outside the export the export", not where it leads.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

import mfsdp_ckpt.convert.export_hf as export_module
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # 26 tensors, qwen2
SHARD_BYTES = "150000"  # 4 shards of the fixture's fp32 weights
INDEX = "model.safetensors.index.json"


def _header(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + length]), data[8 + length :]


def _write(path: Path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size - 100)


def _overlap(path: Path) -> None:
    header, data = _header(path)
    names = sorted(
        (k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"]
    )
    begin, end = header[names[1]]["data_offsets"]
    header[names[1]]["data_offsets"] = [begin - 4, end - 4]
    _write(path, header, data)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _bad_json(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[9] = ord("}")
    path.write_bytes(bytes(data))


def _symlink(path: Path) -> None:
    shutil.copy(path, path.parent.parent / "outside.safetensors")
    path.unlink()
    path.symlink_to("../outside.safetensors")


def _add_tensor(path: Path) -> None:
    header, data = _header(path)
    header["zzz.extra"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
    _write(path, header, data + b"\0" * 4)


# damage: (what it does to a weight file, words its reason must hold)
FILE_DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated": (_truncate, "(truncated?)"),
    "overlapping": (_overlap, "overlaps the tensor before it"),
    "fifo": (_fifo, "a FIFO"),
    "bad-header": (_bad_json, "not valid JSON"),
    "deleted": (Path.unlink, "missing"),
    "symlink": (_symlink, "a symlink to ../outside.safetensors"),
}


def _export_damaged(
    monkeypatch, out: Path, damage: Callable[[Path], None], *args: str
) -> tuple[int, str, str]:
    """`mfsdp ckpt export-hf RUN --out OUT --verify ARGS` with `damage(work dir)` done just
    before the real verify reads the hidden work dir; (exit code, stdout, stdout + stderr)."""
    real = export_module.verify_export

    def damaged_first(plan, out_dir, **kwargs):
        damage(Path(out_dir))
        return real(plan, out_dir, **kwargs)

    monkeypatch.setattr(export_module, "verify_export", damaged_first)
    code, stdout, err = run_cli("ckpt", "export-hf", RUN, "--out", out, "--verify", *args)
    assert not out.exists(), "a failed verify published the export"
    return code, stdout, stdout + err


def _error(said: str, as_json: bool) -> str:
    if as_json:
        return json.loads(said)["error"]
    [line] = [line for line in said.splitlines() if line.startswith("error:")]
    return line


def _first_shard(work: Path) -> Path:
    return sorted(work.glob("model-*.safetensors"))[0]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("kind", sorted(FILE_DAMAGE))
def test_a_damaged_single_file_is_named_with_its_reason_once(tmp_path, monkeypatch, kind, as_json):
    damage, reason = FILE_DAMAGE[kind]
    out = tmp_path / "hf"
    code, stdout, said = _export_damaged(
        monkeypatch, out, lambda work: damage(work / "model.safetensors"), *(["--json"] * as_json)
    )
    error = _error(stdout if as_json else said, as_json)
    assert code == 1, said
    assert "verify: 1 mismatch(es): model.safetensors: " in error, error
    assert reason in error and "its 26 tensor(s) not compared" in error, error
    assert "missing from the export" not in error and "export-tmp" not in error, error


@pytest.mark.parametrize("kind", sorted(FILE_DAMAGE))
def test_a_damaged_shard_is_one_line_not_one_per_tensor(tmp_path, monkeypatch, kind):
    damage, reason = FILE_DAMAGE[kind]
    out = tmp_path / "hf"
    code, _, said = _export_damaged(
        monkeypatch, out, lambda work: damage(_first_shard(work)), "--max-shard-size", SHARD_BYTES
    )
    error = _error(said, False)
    assert code == 1, said
    assert "verify: 1 mismatch(es): model-00001-of-00004.safetensors: " in error, error
    assert reason in error and "export-tmp" not in error, error


def test_a_symlink_names_its_target_in_plain_words(tmp_path, monkeypatch):
    out = tmp_path / "hf"

    def link_out(work: Path) -> None:
        (work / "model.safetensors").unlink()
        (work / "model.safetensors").symlink_to("/etc/hostname")

    code, _, said = _export_damaged(monkeypatch, out, link_out)
    error = _error(said, False)
    assert code == 1 and "model.safetensors: a symlink to /etc/hostname" in error, said
    words = error.split()
    assert all(a != b for a, b in itertools.pairwise(words)), error  # no doubled words


def test_a_sharded_export_without_its_index_is_refused(tmp_path, monkeypatch):
    out = tmp_path / "hf"
    code, _, said = _export_damaged(
        monkeypatch, out, lambda work: (work / INDEX).unlink(), "--max-shard-size", SHARD_BYTES
    )
    assert code == 1, said
    assert f"verify: 1 mismatch(es): {INDEX}: missing" in _error(said, False), said


def test_one_file_named_as_a_shard_needs_its_index_too(tmp_path, monkeypatch):
    out = tmp_path / "hf"

    def rename(work: Path) -> None:
        (work / "model.safetensors").rename(work / "model-00001-of-00001.safetensors")

    code, _, said = _export_damaged(monkeypatch, out, rename)
    assert code == 1 and f"{INDEX}: missing" in _error(said, False), said


def test_a_tensor_the_index_does_not_list_is_a_mismatch(tmp_path, monkeypatch):
    out = tmp_path / "hf"
    code, _, said = _export_damaged(
        monkeypatch,
        out,
        lambda work: _add_tensor(_first_shard(work)),
        "--max-shard-size",
        SHARD_BYTES,
    )
    error = _error(said, False)
    assert code == 1, said
    assert "zzz.extra: in model-00001-of-00004.safetensors but not in the index" in error, error


def test_a_tensor_in_another_shard_than_the_index_says_names_both(tmp_path, monkeypatch):
    out = tmp_path / "hf"

    def relist(work: Path) -> None:
        index = json.loads((work / INDEX).read_text())
        weight_map = index["weight_map"]
        files = sorted(set(weight_map.values()))
        moved = sorted(name for name, file in weight_map.items() if file == files[0])[0]
        weight_map[moved] = files[1]
        (work / INDEX).write_text(json.dumps(index))

    code, _, said = _export_damaged(monkeypatch, out, relist, "--max-shard-size", SHARD_BYTES)
    error = _error(said, False)
    assert code == 1 and "verify: 1 mismatch(es): " in error, said
    assert (
        "in model-00001-of-00004.safetensors, where the index lists"
        " model-00002-of-00004.safetensors"
    ) in error, error


@pytest.mark.parametrize(
    "content,reason",
    [
        (b"\xff\xfe garbage", "not UTF-8 text"),
        (None, "is not a plain file name inside the export"),
    ],
    ids=["garbage", "escape"],
)
def test_a_damaged_index_is_named_inside_the_export(tmp_path, monkeypatch, content, reason):
    out = tmp_path / "hf"

    def spoil(work: Path) -> None:
        if content is not None:
            (work / INDEX).write_bytes(content)
            return
        index = json.loads((work / INDEX).read_text())
        name = next(iter(index["weight_map"]))
        index["weight_map"][name] = "../" + index["weight_map"][name]
        (work / INDEX).write_text(json.dumps(index))

    code, _, said = _export_damaged(monkeypatch, out, spoil, "--max-shard-size", SHARD_BYTES)
    error = _error(said, False)
    assert code == 1, said
    assert error.startswith(f"error: verify: 1 mismatch(es): {INDEX}: ") and reason in error, error
    assert "export-tmp" not in error and str(tmp_path) not in error, error


def test_an_undamaged_sharded_export_still_verifies(tmp_path):
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", RUN, "--out", out, "--verify", "--max-shard-size", SHARD_BYTES
    )
    assert code == 0 and "verified" in stdout + err, stdout + err
    assert len(list(out.glob("model-*.safetensors"))) == 4
