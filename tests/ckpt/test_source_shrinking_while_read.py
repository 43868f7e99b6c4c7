"""A source file truncated while export-hf or import-hf reads it is one line naming that
source, "changed while it was read", exit 1, and no temporary output left.

Was: the NaN/Inf scan mapped the file after its size was checked: truncated before the map,
a `ValueError: mmap length is greater than file size` traceback; truncated while the map
was read, SIGBUS (exit 135, no line, the hidden temporary output left behind). A copy that
met the shorter source blamed the output file ("copy_file_range stopped at ...").
Each test truncates the source through a second handle at a known point of the read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mfsdp_ckpt.check.removed_while_read import CheckpointRemovedError
from mfsdp_ckpt.convert import import_hf
from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.format.finite import PIECE_ELEMENTS, count_nonfinite_in_file
from mfsdp_ckpt.storage import piece_reads
from mfsdp_ckpt.storage.dcp_stream_writer import StreamingDcpWriter
from tests.support.hf_model_files import hidden_leftovers, saved_hf_model
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.paths import REPO

CHANGED = "changed while it was read"

# Scans a two-piece float32 tensor; the file is truncated through a second handle as the
# first piece is about to be counted, while the scan is part-way through the file.
_TRUNCATED_MID_SCAN = """
import os, sys
from mfsdp_ckpt.format import finite
from mfsdp_ckpt.format.dtypes import BY_NAME
path, numel = sys.argv[1], int(sys.argv[2])
counting = finite.count_nonfinite
def truncate_then_count(data, dtype):
    with open(path, "r+b") as other:
        other.truncate(4096)
    return counting(data, dtype)
finite.count_nonfinite = truncate_then_count
fd = os.open(path, os.O_RDONLY)
try:
    finite.count_nonfinite_in_file(fd, 0, numel, BY_NAME["float32"])
except Exception as err:
    print(type(err).__name__, err)
"""


def _truncate(path: Path, size: int = 0) -> None:
    with open(path, "r+b") as other:  # a second handle, as another process would
        other.truncate(size)


def test_a_file_truncated_after_it_was_opened_is_named_by_the_scan(tmp_path):
    path = tmp_path / "t.bin"
    path.write_bytes(np.zeros(4096, dtype=np.float32).tobytes())
    fd = os.open(path, os.O_RDONLY)
    try:
        _truncate(path, 100)
        with pytest.raises(CheckpointRemovedError) as caught:
            count_nonfinite_in_file(fd, 0, 4096, BY_NAME["float32"])
    finally:
        os.close(fd)
    assert str(caught.value) == (f"{path}: {CHANGED} (100 bytes now, 16384 needed); read it again")


def test_a_file_truncated_part_way_through_the_scan_is_a_line_not_a_bus_error(tmp_path):
    numel = 2 * PIECE_ELEMENTS
    path = tmp_path / "t.bin"
    path.write_bytes(bytes(numel * 4))
    done = subprocess.run(
        [sys.executable, "-c", _TRUNCATED_MID_SCAN, str(path), str(numel)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == (
        f"CheckpointRemovedError {path}: {CHANGED} (4096 bytes now, {numel * 4} needed);"
        " read it again"
    )


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory) -> Path:
    return saved_hf_model(tmp_path_factory.mktemp("shrinking"), "qwen2", tied=False)


def _assert_one_line_naming(code: int, err: str, source: Path, now: int, out_parent: Path) -> None:
    line = one_error_line(err)
    assert code == 1, err
    assert line.startswith(f"error: {source}: {CHANGED} ({now} bytes now, "), line
    assert line.endswith(" needed); read it again"), line
    assert hidden_leftovers(out_parent) == [], hidden_leftovers(out_parent)


@pytest.mark.parametrize("allow_nonfinite", [False, True], ids=["scanned", "copied"])
def test_import_of_a_source_truncated_meanwhile_names_it(
    hf_model, tmp_path, monkeypatch, allow_nonfinite
):
    model = tmp_path / "model"
    model.mkdir()
    for file in hf_model.iterdir():
        (model / file.name).write_bytes(file.read_bytes())
    source = model / "model.safetensors"
    adding = StreamingDcpWriter.add_raw

    def truncated_then_added(self, *args, **kwargs):  # its header was read and checked
        _truncate(source)
        return adding(self, *args, **kwargs)

    refusing = import_hf._refuse_nonfinite_sources

    def truncated_then_scanned(*args):
        _truncate(source)
        return refusing(*args)

    monkeypatch.setattr(StreamingDcpWriter, "add_raw", truncated_then_added)
    monkeypatch.setattr(import_hf, "_refuse_nonfinite_sources", truncated_then_scanned)
    out = tmp_path / "out"
    flags = ["--allow-nonfinite"] if allow_nonfinite else []
    code, _, err = run_cli("ckpt", "import-hf", model, "--out", out, "--layout", "hf", *flags)
    _assert_one_line_naming(code, err, source, 0, tmp_path)
    assert not out.exists()


def _export(ckpt: Path, hf_model: Path, out: Path, *flags: str) -> tuple[int, str, str]:
    one_thread = ("--workers", "1")  # tensors in the same order every time
    return run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", hf_model, "--out", out, *one_thread, *flags
    )


@pytest.mark.parametrize("allow_nonfinite", [False, True], ids=["scanned", "copied"])
def test_export_of_a_shard_truncated_meanwhile_names_it(
    hf_model, tmp_path, monkeypatch, allow_nonfinite
):
    ckpt = tmp_path / "ckpt"
    code, _, err = run_cli("ckpt", "import-hf", hf_model, "--out", ckpt)
    assert code == 0, err
    flags = ["--allow-nonfinite"] if allow_nonfinite else []
    checking = piece_reads.check_size
    checked: list[tuple[Path, int]] = []

    def counted(fd, needed, path):
        checking(fd, needed, path)
        checked.append((path, needed))

    monkeypatch.setattr(piece_reads, "check_size", counted)
    code, _, err = _export(ckpt, hf_model, tmp_path / "whole", *flags)
    assert code == 0 and checked, err
    shard, needed = checked[-1]  # the last tensor streamed: no read comes after its own

    def checked_then_truncated(fd, needed_now, path):
        checking(fd, needed_now, path)
        if (path, needed_now) == (shard, needed):
            _truncate(path, needed - 1)

    monkeypatch.setattr(piece_reads, "check_size", checked_then_truncated)
    out = tmp_path / "exported"
    code, _, err = _export(ckpt, hf_model, out, *flags)
    _assert_one_line_naming(code, err, shard, needed - 1, tmp_path)
    assert not out.exists()
