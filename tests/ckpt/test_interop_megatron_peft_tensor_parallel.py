"""A Megatron LoRA adapter on a fused linear_fc1 saved with tensor parallelism.

linear_fc1's B is a column-parallel weight: each tensor-parallel rank holds the rows of its
own [gate_r; up_r], and an fsdp_dtensor save keeps them in rank order ([gate_0; up_0;
gate_1; up_1]) without splitting them into _w / _v as it does the base weight. Export
refused every such adapter (exit 2) once any record said tensor_model_parallel_size > 1.
Where the record proves the order (ckpt_format fsdp_dtensor: `recorded_layout`), B's rows
are now split rank by rank exactly as a fused base weight's are: merged, adapter-only and
merged onto a base named by --hf-config, each compared exactly with a reference computed
here in plain torch. Where it does not (verl records the ranks but no format), the adapter
is still refused, naming B and the record.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, per_rank_gate_up, run_cli
from tests.support.megatron_checkpoints import (
    STEP,
    bridge_run,
    mcore_weights,
    megatron_args,
    save_dcp,
)

RANK, ALPHA = 4, 8.0
SCALE = ALPHA / RANK
FC1_B = "model.module.decoder.layers.0.mlp.linear_fc1.adapter.linear_out.weight"


def _hf_lora(model) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{HF module: (A, B)}: gate_proj and up_proj share linear_fc1's A; o_proj its own."""
    generator = torch.Generator().manual_seed(5)
    found = {}
    for layer in range(model.config.num_hidden_layers):
        stem = f"model.layers.{layer}"
        hidden, ffn = model.config.hidden_size, model.config.intermediate_size
        a = torch.randn(RANK, hidden, generator=generator) * 0.1
        for module in ("mlp.gate_proj", "mlp.up_proj"):
            found[f"{stem}.{module}"] = (a, torch.randn(ffn, RANK, generator=generator) * 0.1)
        o_a = torch.randn(RANK, hidden, generator=generator) * 0.1
        found[f"{stem}.self_attn.o_proj"] = (o_a, torch.randn(hidden, RANK, generator=generator))
    return found


def _megatron_adapters(model, lora, ranks: int) -> dict[str, torch.Tensor]:
    """The adapter under Megatron's names, fc1's B in the rank order of `ranks` pieces."""
    found = {}
    for layer in range(model.config.num_hidden_layers):
        stem, mc = f"model.layers.{layer}", f"module.decoder.layers.{layer}"
        (a, gate), (_, up) = lora[f"{stem}.mlp.gate_proj"], lora[f"{stem}.mlp.up_proj"]
        found[f"{mc}.mlp.linear_fc1.adapter.linear_in.weight"] = a.clone()
        fused = per_rank_gate_up(torch.cat([gate, up]), ranks)
        found[f"{mc}.mlp.linear_fc1.adapter.linear_out.weight"] = fused
        o_a, o_b = lora[f"{stem}.self_attn.o_proj"]
        found[f"{mc}.self_attention.linear_proj.adapter.linear_in.weight"] = o_a.clone()
        found[f"{mc}.self_attention.linear_proj.adapter.linear_out.weight"] = o_b.clone()
    return found


def _merged_reference(model, lora) -> dict[str, torch.Tensor]:
    """Every HF weight of `model`, each adapted one plus SCALE * B @ A in fp32, computed as
    a merge computes it."""
    weights = {name: value.float() for name, value in model.state_dict().items()}
    for module, (a, b) in lora.items():
        weights[f"{module}.weight"] = weights[f"{module}.weight"] + (b @ a) * SCALE
    return weights


def _megatron_lm_run(tmp_path, model, lora, ranks: int):
    """Megatron-LM's fsdp_dtensor save of a LoRA run with `ranks` tensor-parallel ranks:
    its args record ckpt_format and tensor_model_parallel_size (alpha: none)."""
    args = megatron_args(model, tensor_model_parallel_size=ranks, ckpt_format="fsdp_dtensor")
    run = tmp_path / "megatron"
    weights = {**mcore_weights(model), **_megatron_adapters(model, lora, ranks)}
    state = {"args": args, "checkpoint_version": 3.0, "iteration": STEP, "model": weights}
    save_dcp(state, run / f"iter_{STEP:07d}")
    (run / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    return run


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_merged_export_splits_fc1s_b_rank_by_rank(ranks, tmp_path):
    """Was: exit 2, "a linear_fc1 LoRA adapter saved with tensor parallelism ..."."""
    model = tiny_causal_lm("llama", vocab=64)
    lora = _hf_lora(model)
    run = _megatron_lm_run(tmp_path, model, lora, ranks)
    out = tmp_path / "merged"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", out, "--lora-alpha", ALPHA, "--dtype", "fp32"
    )
    assert code == 0, stdout + err
    written, expected = load_file(out / "model.safetensors"), _merged_reference(model, lora)
    assert sorted(written) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(written[name], tensor), name
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0, stdout + err


def test_adapter_only_writes_each_modules_rows_of_b(tmp_path):
    model = tiny_causal_lm("llama", vocab=64)
    lora = _hf_lora(model)
    run = _megatron_lm_run(tmp_path, model, lora, ranks=2)
    out = tmp_path / "adapter"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", out, "--adapter-only", "--lora-alpha", ALPHA
    )
    assert code == 0, stdout + err
    written = load_file(out / "adapter_model.safetensors")
    assert len(written) == 2 * len(lora)
    for module, (a, b) in lora.items():
        stem = f"base_model.model.{module}"
        assert torch.equal(written[f"{stem}.lora_A.weight"], a), module
        assert torch.equal(written[f"{stem}.lora_B.weight"], b), module


def test_a_bridge_adapter_merges_onto_its_base_split_rank_by_rank(tmp_path):
    """Megatron-Bridge's PEFT save (adapter only) of a run with tensor_model_parallel_size 2
    and checkpoint.ckpt_format fsdp_dtensor, merged onto --hf-config BASE_DIR."""
    model = tiny_causal_lm("llama", vocab=64)
    lora = _hf_lora(model)
    run = bridge_run(tmp_path, model, steps=(10,))
    step = run / "iter_0000010"
    for file in [*step.glob("*.distcp"), step / ".metadata"]:
        file.unlink()
    state = {"model": _megatron_adapters(model, lora, 2), "iteration": 10}
    save_dcp({**state, "checkpoint_version": 3.0}, step)
    config = yaml.safe_load((step / "run_config.yaml").read_text())
    config["model"]["tensor_model_parallel_size"] = 2
    config["peft"] = {"_target_": "megatron.bridge.peft.lora.LoRA", "dim": RANK, "alpha": 8}
    (step / "run_config.yaml").write_text(yaml.safe_dump(config))
    base = tmp_path / "base"
    model.save_pretrained(base)
    out = tmp_path / "merged"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--hf-config", base, "--out", out)
    assert code == 0, stdout + err
    written, expected = load_file(out / "model.safetensors"), _merged_reference(model, lora)
    for name, tensor in expected.items():
        assert torch.equal(written[name], tensor), name


def test_an_order_the_record_does_not_prove_is_still_refused(tmp_path):
    """verl's transformer_config.json records the ranks and no checkpoint format."""
    model = tiny_causal_lm("llama", vocab=64)
    lora = _hf_lora(model)
    run = tmp_path / "verl"
    actor = run / "global_step_5" / "actor"
    weights = {**mcore_weights(model), **_megatron_adapters(model, lora, 2)}
    save_dcp({"model": weights}, actor / "model" / "dist_ckpt")
    model.config.save_pretrained(actor / "model" / "huggingface")
    record = actor / "transformer_config.json"
    record.write_text(json.dumps({"tensor_model_parallel_size": 2, "num_layers": 2}))
    (actor / "ckpt_contents.json").write_text(json.dumps({"schema_version": 2}))
    (run / "latest_checkpointed_iteration.txt").write_text("5")
    out = tmp_path / "out"
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", out, "--lora-alpha", ALPHA)
    line = one_error_line(err)
    assert code == 1 and f"[{FC1_B}]: the LoRA B of a fused linear_fc1" in line, err
    assert f"tensor_model_parallel_size=2 ({record})" in line and "no checkpoint format" in line
    assert not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and f"[{FC1_B}]" in stdout and "no checkpoint format" in stdout, stdout
