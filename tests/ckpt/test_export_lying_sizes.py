"""Metadata that declares gigabytes its files do not hold: export holds no disk for them
before their first read fails, validate says what it cannot read, and running out of
memory for a tensor held whole is one line naming it (with --json, a JSON object).

Each checkpoint is a tiny Qwen2 saved with DCP whose `.metadata` then claims an embedding
of 2**22 or more rows: over a 100-byte blob marked compressed, or over a sparse file.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from click.testing import CliRunner
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, Metadata, MetadataIndex

from cli.main import app
from mfsdp_ckpt.convert.hf_shapes import hf_state_dict_shapes
from mfsdp_ckpt.storage.blob_decode import undecodable_transforms
from tests.support.paths import REPO

EMBED = "model.model.embed_tokens.weight"
HIDDEN = 64
CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "vocab_size": 256,
    "hidden_size": HIDDEN,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "dtype": "float32",
}
Edit = Callable[[Metadata, Path], None]
SMALL = 1 << 20  # any reservation at least this large is for the lying embedding


def _checkpoint(tmp_path: Path, rows: int = CONFIG["vocab_size"], edit: Edit | None = None) -> Path:
    """A bare dist_ckpt of the tiny model whose embedding `.metadata` then says has `rows`
    rows (`edit` points its chunks somewhere), `hf/config.json` agreeing, and an empty
    `parent/` for --out. Without `edit`, the checkpoint as saved."""
    torch.manual_seed(0)
    shapes = hf_state_dict_shapes(CONFIG)
    shapes.pop("lm_head.weight")  # tied
    ckpt = tmp_path / "dist_ckpt"
    dcp.save(
        {f"model.{name}": torch.randn(shape) for name, shape in shapes.items()},
        checkpoint_id=str(ckpt),
        no_dist=True,
    )
    if edit is not None:
        metadata = pickle.loads((ckpt / ".metadata").read_bytes())
        metadata.state_dict_metadata[EMBED].size = torch.Size([rows, HIDDEN])
        for index in [i for i in metadata.storage_data if i.fqn == EMBED]:
            del metadata.storage_data[index]
        edit(metadata, ckpt)
        (ckpt / ".metadata").write_bytes(pickle.dumps(metadata))
    (tmp_path / "parent").mkdir()
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**CONFIG, "vocab_size": rows}))
    return ckpt


def _compressed(transforms: list[str]) -> Edit:
    """The whole embedding in one chunk: a 100-byte blob said to be stored `transforms`."""

    def edit(metadata: Metadata, ckpt: Path) -> None:
        item = metadata.state_dict_metadata[EMBED]
        item.chunks = [ChunkStorageMetadata(torch.Size([0, 0]), item.size)]
        file = sorted(p.name for p in ckpt.glob("*.distcp"))[0]
        metadata.storage_data[MetadataIndex(EMBED, torch.Size([0, 0]))] = _StorageInfo(
            file, 0, 100, transforms
        )

    return edit


def _sparse(metadata: Metadata, ckpt: Path) -> None:
    """The embedding in two halves whose blobs lie in a sparse file of their declared size
    (holes read as zeros: no torch.save archive there)."""
    item = metadata.state_dict_metadata[EMBED]
    rows = item.size[0]
    half = rows // 2
    length = half * HIDDEN * 4 + 4096
    item.chunks = []
    for first in (0, half):
        item.chunks.append(ChunkStorageMetadata(torch.Size([first, 0]), torch.Size([half, HIDDEN])))
        metadata.storage_data[MetadataIndex(EMBED, torch.Size([first, 0]))] = _StorageInfo(
            "__sparse.distcp", length * (first // half), length
        )
    with open(ckpt / "__sparse.distcp", "wb") as sparse:
        sparse.truncate(2 * length)


@pytest.fixture
def reserved(monkeypatch) -> list[int]:
    """The size of each reservation the export makes; those for the lying tensor are noted,
    not made (the disk stays free whichever code runs)."""
    sizes: list[int] = []
    fallocate = os.posix_fallocate

    def watched(fd: int, offset: int, size: int) -> None:
        sizes.append(size)
        if size < SMALL:
            fallocate(fd, offset, size)

    monkeypatch.setattr(os, "posix_fallocate", watched)
    return sizes


def _cli(*args: object):
    return CliRunner().invoke(app, [str(arg) for arg in args])


def _json_error(result, *needles: str) -> str:
    """The JSON object a failed --json run prints on stdout: its one error names them all."""
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    for needle in needles:
        assert needle in error, error
    return error


@pytest.mark.parametrize("transform", ["stream.brotli/1", "stream.no-such-codec/1"])
def test_blobs_stored_with_transforms_we_cannot_decode_are_refused_up_front(
    tmp_path, reserved, transform
):
    """A codec DCP does not know (as zstd is without `zstandard`/`pyzstd` installed):
    validate called the 4 GiB embedding valid, and export reserved its 4 GiB before
    failing."""
    assert undecodable_transforms((transform,)) is not None  # none here decodes it
    ckpt = _checkpoint(tmp_path, 1 << 24, _compressed([transform]))
    validated = _cli("ckpt", "validate", ckpt, "--json")
    assert validated.exit_code == 1, validated.output
    report = json.loads(validated.stdout)
    assert not report["valid"]
    assert any(
        EMBED in f["where"] and "cannot decode transforms" in f["message"]
        for f in report["findings"]
    ), report["findings"]
    out = tmp_path / "parent" / "out"
    exported = _cli(
        "ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "hf", "--out", out, "--json"
    )
    _json_error(exported, EMBED, "cannot decode transforms", transform)
    assert reserved == []  # refused before the output files were opened
    assert list(out.parent.iterdir()) == []


def test_sizes_over_a_sparse_file_reserve_no_disk_before_their_first_read(tmp_path, reserved):
    """A sparse file of the declared size passes every size check (and st_blocks is no
    test: compressed filesystems report few blocks for real data); its holes hold no
    torch.save archive, so the first read fails. The 1 GiB embedding is never reserved."""
    ckpt = _checkpoint(tmp_path, 1 << 22, _sparse)
    out = tmp_path / "parent" / "out"
    result = _cli("ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "hf", "--out", out, "--json")
    _json_error(result, EMBED, "not a torch.save zip archive")
    assert reserved and max(reserved) < SMALL, reserved  # the small tensors, one by one
    assert list(out.parent.iterdir()) == []


def test_a_disk_too_small_for_the_export_fails_at_the_start(tmp_path, reserved, monkeypatch):
    """Reserving per tensor keeps the early failure: the filesystem's free space is
    compared with what the files need before anything is written."""
    ckpt = _checkpoint(tmp_path)
    statvfs = os.statvfs

    def nearly_full(path):
        real = statvfs(path)
        if "parent" not in str(path):
            return real
        fields = list(real)
        fields[3] = fields[4] = 1  # f_bfree, f_bavail: one block
        return os.statvfs_result(fields)

    monkeypatch.setattr(os, "statvfs", nearly_full)
    out = tmp_path / "parent" / "out"
    result = _cli("ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "hf", "--out", out)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and str(out) in lines[0], result.output
    assert os.strerror(errno.ENOSPC) in lines[0] and ".export-" not in lines[0]
    assert reserved == []
    assert list(out.parent.iterdir()) == []


# Runs mfsdp with its address space capped a little above what it holds once torch and the
# CLI are imported: holding the 2 GiB embedding whole is then an allocation that fails.
_CAPPED = """
import resource, sys
import torch, cli.main
with open("/proc/self/status") as status:
    held = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (held + (768 << 20), resource.RLIM_INFINITY))
sys.argv = ["mfsdp", *sys.argv[1:]]
cli.main.main()
"""


def _capped(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _CAPPED, *map(str, args), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_validate_deep_reads_a_tensor_past_the_memory_cap_by_pieces(tmp_path):
    """validate --deep held the 2 GiB embedding whole and ran out of memory under the cap;
    it reads it a window at a time now, and reports what its blobs are."""
    ckpt = _checkpoint(tmp_path, 1 << 23, _sparse)
    done = _capped("ckpt", "validate", ckpt, "--deep")
    report = json.loads(done.stdout)
    assert done.returncode == 1 and "out of memory" not in done.stdout + done.stderr, done.stderr
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert [f["where"] for f in errors] == [f"[{EMBED}]"], report
    assert "not a torch.save zip archive" in errors[0]["message"], report


def test_running_out_of_memory_for_a_tensor_is_one_line_naming_it(tmp_path):
    """torch's allocator error (a RuntimeError) came out as a traceback, and --json printed
    nothing; now one line names the tensor and its bytes, exit 1."""
    ckpt = _checkpoint(tmp_path, 1 << 23, _sparse)
    out = tmp_path / "out"
    done = _capped(
        "ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "hf", "--out", out, "--workers", 1
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    error = json.loads(done.stdout)["error"]
    for needle in (EMBED, "out of memory", str((1 << 23) * HIDDEN * 4)):
        assert needle in error, error
    assert [line for line in done.stderr.splitlines() if line.strip()] == [f"error: {error}"]
