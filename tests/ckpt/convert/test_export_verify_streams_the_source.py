"""export-hf --verify reads the source of a streamed tensor a piece at a time, as the export
wrote it, and still compares every bit.

It converted each source tensor whole before comparing: a bf16 export of an fp32 checkpoint
held the largest tensor in fp32 and its bf16 cast at once (about 1.6x it), where the export
itself streams it through small buffers. Now a tensor the export streams is read, cast and
compared a piece at a time on both sides.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.convert.export_stream import STREAM_PIECE_ELEMENTS
from tests.support.export import save_single_process_checkpoint, verify_export_dir

# one layer whose MLP matrices (256 x 12288 fp32, 12 MiB) span several stream pieces
WIDE_MLP = dict(hidden_size=256, intermediate_size=12288, num_hidden_layers=1)
LARGEST = "model.layers.0.mlp.down_proj.weight"


@pytest.fixture(scope="module")
def bf16_export(tmp_path_factory):
    """(fp32 checkpoint, its bf16 export)."""
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("verify_streams")
    assets = build_tiny_model_dir(root / "assets")
    fields = {**json.loads((assets / "config.json").read_text()), **WIDE_MLP}
    fields.pop("layer_types", None)  # one per layer: made again for the new count
    (assets / "config.json").write_text(json.dumps(fields))
    save_single_process_checkpoint(root / "run", assets, seed=5)
    export_hf(root / "run", root / "hf", dtype="bf16")
    return root / "run", root / "hf"


def _tensor_bytes(file: Path, name: str) -> tuple[int, int]:
    """(bytes, where they begin in `file`) of tensor `name`, read from the header by hand."""
    with open(file, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        begin, end = json.loads(handle.read(length))[name]["data_offsets"]
    return end - begin, 8 + length + begin


def test_the_source_is_read_a_piece_at_a_time(bf16_export, monkeypatch):
    run, out = bf16_export
    nbytes, _ = _tensor_bytes(out / "model.safetensors", LARGEST)
    assert nbytes > 2 * STREAM_PIECE_ELEMENTS * 2  # bf16: three pieces
    inside, real, reads = os.path.realpath(run), os.preadv, []

    def recording(fd, buffers, offset, *args):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(inside):
            reads.append(sum(len(b) for b in buffers))
        return real(fd, buffers, offset, *args)

    monkeypatch.setattr(os, "preadv", recording)
    assert verify_export_dir(run, out) == []
    assert sum(reads) >= nbytes * 2  # the fp32 source of the largest tensor was read ...
    assert max(reads) <= STREAM_PIECE_ELEMENTS * 4  # ... never more than a piece at once


@pytest.mark.parametrize("where", ["first", "last"])
def test_a_flipped_bit_in_any_piece_is_named(bf16_export, tmp_path, where):
    run, out = bf16_export
    copy = tmp_path / "hf"
    shutil.copytree(out, copy)
    file = copy / "model.safetensors"
    nbytes, begin = _tensor_bytes(file, LARGEST)
    at = begin + (1 if where == "first" else nbytes - 1)
    with open(file, "r+b") as handle:
        handle.seek(at)
        byte = handle.read(1)[0]
        handle.seek(at)
        handle.write(bytes([byte ^ 0x01]))  # the lowest bit of one byte
    problems = verify_export_dir(run, copy)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{LARGEST}: 1 byte(s) differ"), problems
