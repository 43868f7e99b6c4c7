"""What Megatron-LM's converter (`checkpoint_inspector.py convert-torch-dist-to-fsdp-dtensor`)
makes of a megatron-core 0.19 torch_dist save is read, and the route to it is one that runs.

Was: the converter copies every bytes entry of its input, so its finished fsdp_dtensor
output holds the save's `common_state/shard_0_1` entry, and that alone called it "a Megatron
torch_dist save that did not finish" (exit 1) everywhere. SequentialMLP's experts (Megatron's
default, moe_grouped_gemm off) come out of it stacked per layer, `experts.experts.linear_fc1
.weight` [E, 2F, H] (each expert [gate; up]) and `linear_fc2.weight` [E, H, F], which were
refused as "experts in a layout not converted here". And the refusal of a torch_dist save
named the converter, which stops on a 0.19 save ("Common file .../common.pt does not
exist"): for a save without common.pt it now says how to write that file first.
"""

from __future__ import annotations

import io
import pickle

import pytest
import torch

from mfsdp_ckpt.format.unfinished_torch_dist import is_unfinished_torch_dist
from tests.support.export import load_report
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import STEP, adam_state, megatron_args, save_dcp
from tests.support.megatron_checkpoints import mcore_weights as per_expert_weights

_SEQUENTIAL = ".mlp.experts.local_experts."


def _stacked(weights: dict[str, torch.Tensor], halves: bool = False) -> dict[str, torch.Tensor]:
    """SequentialMLP's per-expert `_w` / `_v` / fc2 tensors as torch_dist stacks them per
    layer and the converter keeps them: fc1 [E, 2F, H] (each expert [gate; up]), fc2 [E, H, F];
    with `halves`, fc1 as gate and up stacks `weight_w` / `weight_v` [E, F, H]."""
    out = {k: v for k, v in weights.items() if _SEQUENTIAL not in k}
    layers = sorted({k.split(_SEQUENTIAL)[0] for k in weights if _SEQUENTIAL in k})
    for layer in layers:
        count = sum(1 for k in weights if k.startswith(layer + _SEQUENTIAL) and "fc2" in k)
        expert = [f"{layer}{_SEQUENTIAL}{e}." for e in range(count)]
        stack = f"{layer}.mlp.experts.experts."
        out[stack + "linear_fc2.weight"] = torch.stack(
            [weights[e + "linear_fc2.weight"] for e in expert]
        )
        gate, up = (
            [weights[e + "linear_fc1.weight" + half] for e in expert] for half in ("_w", "_v")
        )
        if halves:
            out[stack + "linear_fc1.weight_w"] = torch.stack(gate)
            out[stack + "linear_fc1.weight_v"] = torch.stack(up)
        else:
            out[stack + "linear_fc1.weight"] = torch.stack(
                [torch.cat(pair) for pair in zip(gate, up)]
            )
    return out


def _converted(root, model, halves: bool = False, **record):
    """RUN/iter_N as the converter writes it from a 0.19 torch_dist save: the model under
    `model.module.`, Adam state of those tensors, the copied bytes entries (`args` with the
    `record` changes), common_state too."""
    weights = _stacked(per_expert_weights(model, experts="sequential"), halves)
    assert any(".experts.experts." in k for k in weights)
    state = {
        "args": megatron_args(model, **record),
        "checkpoint_version": 3.0,
        "iteration": STEP,
        "model": weights,
        "optimizer": adam_state(weights),
        "common_state/shard_0_1": io.BytesIO(pickle.dumps({"iteration": STEP})),
    }
    run = root / "converted"
    step = save_dcp(state, run / f"iter_{STEP:07d}")
    (run / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    return run, step


# The converter keeps the run's args: a save of 2 tensor-parallel ranks still holds each
# stacked expert's fc1 as torch_dist gathered it, [gate; up]
RECORDS = {
    "one rank": {},
    "2 tensor-parallel ranks": {"ckpt_format": "torch_dist", "tensor_model_parallel_size": 2},
    "fc1 split into weight_w / weight_v stacks": {"halves": True},
}


@pytest.mark.parametrize("record", RECORDS.values(), ids=list(RECORDS))
def test_converted_moe_save_validates_and_exports_the_hf_weights_exactly(record, tmp_path):
    from transformers import AutoModelForCausalLM

    model = tiny_causal_lm("qwen3_moe")
    run, step = _converted(tmp_path, model, **record)
    assert not is_unfinished_torch_dist(step, sorted(p.name for p in step.iterdir()))
    for command in (["validate", "--deep"], ["inspect"]):
        code, out, err = run_cli("ckpt", *command, run)
        assert code == 0, (command, out, err)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    assert load_report(out) == {}
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).state_dict()
    expected = model.state_dict()
    assert sorted(exported) == sorted(expected)
    unequal = [k for k, v in expected.items() if not torch.equal(exported[k], v)]
    assert not unequal, unequal


def test_a_stack_that_does_not_fit_the_config_is_refused(tmp_path):
    """The stacked experts get the checks the other layouts get: one expert more than the
    config's is refused naming the stored tensor."""
    model = tiny_causal_lm("qwen3_moe")
    run, step = _converted(tmp_path, model)
    weights = _stacked(per_expert_weights(model, experts="sequential"))
    name = next(k for k in weights if k.endswith("experts.experts.linear_fc2.weight"))
    weights[name] = torch.cat([weights[name], weights[name][:1]])
    save_dcp({"args": megatron_args(model), "iteration": STEP, "model": weights}, step)
    code, out, _err = run_cli("ckpt", "validate", "--deep", run)
    line = one_error_line(out)
    assert code == 1 and f"unknown to qwen3_moe (mcore layout), e.g. 'model.{name}'" in line, line


def test_a_torch_dist_save_without_common_pt_is_told_to_write_it(tmp_path):
    step = tmp_path / "iter_0000010"
    save_dcp({"decoder.w": torch.zeros(2)}, step)
    (step / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    code, _out, err = run_cli("ckpt", "validate", step)
    line = one_error_line(err)
    assert code == 2 and line.endswith(
        "Megatron-LM's checkpoint_inspector.py converts it once it holds common.pt"
        " (megatron-core 0.19 keeps that state in the DCP): write it with `python -c"
        ' "import torch; from megatron.core.dist_checkpointing import load_common_state_dict'
        f" as c; torch.save(c('{step}'), '{step / 'common.pt'}')\"`, then"
        " `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 torchrun tools/checkpoint/checkpoint_inspector.py"
        f" convert-torch-dist-to-fsdp-dtensor {step} OUT` (with --swiglu for a SwiGLU MLP)"
        " rewrites it as --ckpt-format fsdp_dtensor, which mfsdp reads"
    ), line
