"""export-hf streams tensors that keep their names: a dtype cast is done a bounded piece at
a time straight from the checkpoint bytes. Pieces that split tensors (and rows) at odd
places must give exactly what casting the whole tensor gives."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from mfsdp_ckpt.convert import export_stream
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.convert.export_plan import DTYPES
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.export import save_single_process_checkpoint
from tests.support.metadata_reads import metadata_reads


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("stream")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"), seed=5)
    return root / "run"


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_piecewise_cast_equals_whole_tensor_cast(run_dir, tmp_path, monkeypatch, dtype):
    monkeypatch.setattr(export_stream, "STREAM_PIECE_ELEMENTS", 1021)  # prime: pieces end mid-row
    out = tmp_path / "hf"
    result = export_hf(run_dir, out, dtype=dtype, verify=True)
    reader = CheckpointReader(run_dir / "global_step_1" / "dist_ckpt")
    name = "model.layers.0.mlp.down_proj.weight"
    assert reader.tensors[f"model.{name}"].numel > 10 * 1021  # really split into many pieces
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        written = handle.get_tensor(name)
    assert torch.equal(written, reader.read_tensor(f"model.{name}").to(DTYPES[dtype].torch))
    assert result.mismatches == []  # every tensor, against read + .to()
    assert result.dtype == DTYPES[dtype].name


def test_the_metadata_is_read_once_per_export(run_dir, tmp_path, monkeypatch):
    """Validate's checks before planning reuse export's reader: a `.metadata` of millions
    of chunks takes minutes to read, and was read twice."""
    reads = metadata_reads(monkeypatch)
    export_hf(run_dir, tmp_path / "hf")
    assert len(reads) == 1, reads
