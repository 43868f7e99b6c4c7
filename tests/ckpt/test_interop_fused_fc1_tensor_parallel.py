"""A fused SwiGLU linear_fc1 saved with tensor parallelism: gate and up rows in rank order.

Each tensor-parallel rank holds its own [gate_r; up_r] of fc1; a save that keeps the ranks'
pieces in order (a Megatron-FSDP DTensor: fsdp_dtensor) holds [gate_0; up_0; gate_1; up_1],
one with one rank [gate; up]. Export split every fused fc1 as [gate; up] whatever the
record said: a run with tensor_model_parallel_size 2 exported with exit 0 and logits off by
0.16. The record now decides: fsdp_dtensor with N ranks is undone, one rank is [gate; up],
anything else that records several ranks is refused naming the setting and the tensor;
validate says what export does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from mfsdp_ckpt.convert.fused_tensors import split_gate_up
from tests.support.export import logits_of
from tests.support.hf_to_mcore import tiny_causal_lm, to_mcore
from tests.support.interop_layouts import (
    assert_exports_to_source,
    one_error_line,
    per_rank_gate_up,
    run_cli,
    verl_rl_v2,
)
from tests.support.megatron_checkpoints import (
    STEP,
    bridge_run,
    megatron_args,
    save_dcp,
    source_logits,
)

DENSE_FC1 = "mlp.linear_fc1.weight"


def _weights(model, ranks: int) -> dict[str, torch.Tensor]:
    """`model` under Megatron-core names, each fused fc1 held as `ranks` tensor-parallel
    pieces in order."""
    weights = to_mcore(model, norms="te", fc1="fused")
    for name in [k for k in weights if k.endswith(DENSE_FC1)]:
        weights[name] = per_rank_gate_up(weights[name], ranks)
    return {f"module.{k}": v for k, v in weights.items()}


def _megatron(root: Path, weights: dict, args) -> Path:
    run = root / "megatron"
    state = {"args": args, "checkpoint_version": 3.0, "iteration": STEP, "model": weights}
    save_dcp(state, run / f"iter_{STEP:07d}")
    (run / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    return run


def test_split_gate_up_undoes_rank_order_pieces():
    fused = torch.arange(24.0).reshape(12, 2)
    gate, up = fused.chunk(2)
    for ranks in (1, 2, 3):
        got = split_gate_up(per_rank_gate_up(fused, ranks), ranks)
        assert torch.equal(got[0], gate) and torch.equal(got[1], up)


@pytest.mark.parametrize("ranks", [2, 4])
def test_fsdp_dtensor_with_tensor_parallelism_exports_to_the_source_logits(ranks, tmp_path):
    """Was: exit 0, gate and up rows swapped between ranks."""
    model = tiny_causal_lm("llama")
    args = megatron_args(model, tensor_model_parallel_size=ranks, ckpt_format="fsdp_dtensor")
    run = _megatron(tmp_path, _weights(model, ranks), args)
    code, stdout, err = run_cli("ckpt", "validate", run, "--deep")
    assert code == 0, stdout + err
    assert_exports_to_source(model, run, tmp_path / "hf", "--verify")


def test_one_rank_is_gate_then_up(tmp_path):
    model = tiny_causal_lm("llama")
    args = megatron_args(
        model, tensor_model_parallel_size=1, ckpt_format="torch_dcp", use_megatron_fsdp=False
    )
    run = _megatron(tmp_path, _weights(model, 1), args)
    assert_exports_to_source(model, run, tmp_path / "hf")


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        (dict(ckpt_format="torch_dcp"), "ckpt_format 'torch_dcp', which Megatron saves"),
        (dict(ckpt_format=None), "no checkpoint format"),
        (dict(tensor_model_parallel_size="2"), "which is not a rank count"),
    ],
)
def test_several_ranks_without_a_format_that_orders_them_are_refused(changes, named, tmp_path):
    model = tiny_causal_lm("llama")
    args = megatron_args(model, **{"tensor_model_parallel_size": 2, **changes})
    run = _megatron(tmp_path, _weights(model, 2), args)
    out = tmp_path / "hf"
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", out)
    line = one_error_line(err)
    key = f"[model.module.decoder.layers.0.{DENSE_FC1}]"
    assert code == 1 and key in line and "tensor_model_parallel_size=" in line, err
    assert named in line and not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and key in stdout and named in stdout, stdout + err


def test_routed_experts_split_by_expert_tensor_parallel_size(tmp_path):
    """Qwen2-MoE: the shared expert's fc1 over tensor_model_parallel_size 2, the routed
    experts' over expert_tensor_parallel_size 1, and the other way round."""
    model = tiny_causal_lm("qwen2_moe")
    for tp, etp in ((2, 1), (1, 2)):
        weights = to_mcore(model, norms="local", fc1="fused", experts="grouped")
        for name in [k for k in weights if ".linear_fc1.weight" in k]:
            ranks = tp if ".shared_experts." in name else etp
            weights[name] = per_rank_gate_up(weights[name], ranks)
        args = megatron_args(model, tensor_model_parallel_size=tp, expert_tensor_parallel_size=etp)
        root = tmp_path / f"tp{tp}"
        run = _megatron(root, {f"module.{k}": v for k, v in weights.items()}, args)
        assert_exports_to_source(model, run, root / "hf")


def test_bridge_records_its_format_in_the_checkpoint_section(tmp_path):
    """run_config.yaml's `checkpoint.ckpt_format` beside `model.tensor_model_parallel_size`."""
    model = tiny_causal_lm("llama")
    run = bridge_run(tmp_path, model, steps=(10,))
    step = run / "iter_0000010"
    save_dcp({"model": _weights(model, 2)}, step)  # over the split save, same dir
    config = yaml.safe_load((step / "run_config.yaml").read_text())
    config["model"]["tensor_model_parallel_size"] = 2
    (step / "run_config.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_verl_records_ranks_but_no_format(made_optim, tmp_path):
    """verl's transformer_config.json holds tensor_model_parallel_size and no format."""
    laid = verl_rl_v2(made_optim, tmp_path)
    model = tiny_causal_lm("llama")
    save_dcp({"model": _weights(model, 2)}, laid.dist_ckpt)
    model.config.save_pretrained(laid.dist_ckpt.parent / "huggingface")
    verl_config = laid.levels["actor"] / "transformer_config.json"
    verl_config.write_text(json.dumps({"num_layers": 2, "tensor_model_parallel_size": 2}))
    out = tmp_path / "hf"
    code, _, err = run_cli("ckpt", "export-hf", laid.run, "--out", out)
    line = one_error_line(err)
    assert code == 1 and f"({verl_config})" in line and "no checkpoint format" in line, err


def test_a_record_that_cannot_be_read_leaves_the_order_unknown(tmp_path):
    """A fused fc1 is split only as a record proves; an unreadable one proves nothing, and
    is a damaged checkpoint: refused by name before any tensor is split."""
    model = tiny_causal_lm("llama")
    run = bridge_run(tmp_path, model, steps=(10,))
    step = run / "iter_0000010"
    save_dcp({"model": _weights(model, 1)}, step)
    (step / "run_config.yaml").write_text("model: [unclosed\n")
    given = tmp_path / "given"
    model.config.save_pretrained(given)
    out = tmp_path / "hf"
    code, _, err = run_cli("ckpt", "export-hf", run, "--hf-config", given, "--out", out)
    line = one_error_line(err)
    assert code == 1 and f"{step / 'run_config.yaml'}: not valid YAML" in line, err
    assert not out.exists()
