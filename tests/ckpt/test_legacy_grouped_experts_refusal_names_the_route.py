"""Megatron-core's legacy GroupedMLP (`--moe-grouped-gemm --moe-use-legacy-grouped-gemm`)
holds a layer's experts as two tensors, `mlp.experts.weight1` [hidden, experts x 2 ffn]
and `weight2` [experts x ffn, hidden]. Export refuses them and names Megatron-LM's own
route to a layout it reads. Was: "save with TEGroupedMLP or SequentialMLP experts", no help
to a user holding such a checkpoint."""

from __future__ import annotations

import torch

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import STEP, mcore_weights, megatron_args, save_dcp

EXPERTS = 4


def _legacy_grouped(weights: dict, layers: int) -> dict:
    """The per-expert TEGroupedMLP tensors of `weights` as GroupedMLP's weight1 / weight2."""
    for layer in range(layers):
        prefix = f"module.decoder.layers.{layer}.mlp.experts."
        fc1 = [
            torch.cat([weights.pop(f"{prefix}linear_fc1.weight{e}_{half}") for half in "wv"])
            for e in range(EXPERTS)
        ]
        fc2 = [weights.pop(f"{prefix}linear_fc2.weight{e}") for e in range(EXPERTS)]
        weights[prefix + "weight1"] = torch.stack([t.t() for t in fc1]).reshape(fc1[0].shape[1], -1)
        weights[prefix + "weight2"] = torch.stack([t.t() for t in fc2]).reshape(-1, fc2[0].shape[0])
    return weights


def test_legacy_grouped_experts_are_refused_naming_megatron_lms_route(tmp_path):
    model = tiny_causal_lm("qwen3_moe")
    assert model.config.num_experts == EXPERTS
    weights = _legacy_grouped(mcore_weights(model, experts="grouped"), 2)
    args = megatron_args(model, moe_grouped_gemm=True, moe_use_legacy_grouped_gemm=True)
    run = tmp_path / "megatron"
    save_dcp(
        {"args": args, "checkpoint_version": 3.0, "iteration": STEP, "model": weights},
        run / f"iter_{STEP:07d}",
    )
    (run / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and "mlp.experts.weight" in line, stdout + err
    assert "moe_use_legacy_grouped_gemm" in line, line
    assert "--ckpt-convert-format torch_dist --ckpt-convert-save SAVE" in line, line
    assert "convert-torch-dist-to-fsdp-dtensor SAVE/torch_dist/iter_N OUT --swiglu" in line, line
    assert not (tmp_path / "hf").exists()
