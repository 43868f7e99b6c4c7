"""The refusal of a Megatron torch_dist save says when its distributed-optimizer state is
dp_reshardable (Megatron-LM's default: flat per-bucket buffers
`optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(...).bucket_idx_0.exp_avg`) or
dp_zero_gather_scatter (a pickled `optimizer.distributed.dp_group_idx_0.param_state`),
which the inspector it names leaves unconverted.

Was: the line promised an fsdp_dtensor dir "which mfsdp reads" whatever the form; the
inspector's output of a dp_reshardable save then read as INVALID. Now the line says the
weights convert, the optimizer state stays in its form, and how to keep it per parameter.
A fully_reshardable save's line says nothing of it.
"""

from __future__ import annotations

import io

import torch

from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import STEP, save_dcp

BUCKET = (
    "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, torch.float32)"
    ".bucket_idx_0"
)
WEIGHTS = {"embedding.word_embeddings.weight": torch.ones(4, 2)}
RESAVE = "--dist-ckpt-optim-fully-reshardable"


def _torch_dist(root, optimizer: dict) -> str:
    """An iter_N/ as megatron-core's torch_dist save lays it out, refused by validate:
    its one error line."""
    step = save_dcp({**WEIGHTS, **optimizer}, root / f"iter_{STEP:07d}")
    (step / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    code, _stdout, err = run_cli("ckpt", "validate", step)
    assert code == 2, err
    return one_error_line(err)


def test_dp_reshardable_and_dp_zero_gather_scatter_are_named(tmp_path):
    flat = {f"{BUCKET}.{state}": torch.ones(8) for state in ("param", "exp_avg", "exp_avg_sq")}
    line = _torch_dist(tmp_path / "flat", flat)
    assert "its optimizer state is dp_reshardable ([optimizer.distributed." in line, line
    assert "the inspector does not convert" in line and RESAVE in line, line
    blob = io.BytesIO()
    torch.save([{"exp_avg": torch.ones(3)}], blob)
    blob.seek(0)
    line = _torch_dist(
        tmp_path / "zero", {"optimizer.distributed.dp_group_idx_0.param_state/shard_0_1": blob}
    )
    assert "its optimizer state is dp_zero_gather_scatter" in line and RESAVE in line, line


def test_per_parameter_state_says_nothing_of_it(tmp_path):
    state = {"optimizer.state.embedding.word_embeddings.weight.exp_avg": torch.ones(4, 2)}
    line = _torch_dist(tmp_path, state)
    assert "convert-torch-dist-to-fsdp-dtensor" in line and RESAVE not in line, line
