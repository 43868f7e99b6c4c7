"""Megatron PEFT (LoRA) checkpoints: named as what they are, never read as a model.

Megatron-Bridge's save_checkpoint filters the model entry to the adapter's tensors when it
fine-tunes with PEFT (apply_peft_adapter_filter_to_state_dict: names holding `.adapter.`),
whatever the format, fsdp_dtensor included; with also_save_hf_checkpoint it writes a
Hugging Face PEFT adapter into iter_N/hf/. verl's Megatron-FSDP save keeps the whole model
state, the adapter's tensors beside the unmerged base weights, and mbridge writes the PEFT
adapter into model/huggingface/adapter/. The base weights plus the adapter are a model only
once merged, which export does not do for Megatron adapters: it stops in one line saying
so and naming what converts them.
"""

from __future__ import annotations

import json

import torch

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import bridge_run, mcore_weights, save_dcp

RANK = 4


def _adapters(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """LoRA on every linear_qkv, named as Megatron-Bridge's LoRALinear saves it."""
    found = {}
    for key, value in weights.items():
        if key.endswith("linear_qkv.weight"):
            stem = key.removesuffix("weight")
            found[f"{stem}adapter.linear_in.weight"] = torch.randn(RANK, value.shape[1])
            found[f"{stem}adapter.linear_out.weight"] = torch.zeros(value.shape[0], RANK)
    return found


def _bridge_peft_run(tmp_path, hf_adapter: bool):
    model = tiny_causal_lm("qwen2", vocab=500)
    run = bridge_run(tmp_path, model, steps=(10,), rows=512)
    step = run / "iter_0000010"
    for file in [*step.glob("*.distcp"), step / ".metadata"]:
        file.unlink()
    adapter_only = _adapters(mcore_weights(model, 512))
    save_dcp({"model": adapter_only, "checkpoint_version": 3.0, "iteration": 10}, step)
    if hf_adapter:  # also_save_hf_checkpoint=True: the PEFT export beside it
        (step / "hf").mkdir()
        (step / "hf" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    return run, step


def test_a_bridge_peft_checkpoint_is_named_by_export_and_warned_by_validate(tmp_path):
    """Was: export exit 2 "4 tensor(s) have no qwen2 mcore mapping: ..."; validate exit 1
    "the weights do not fit this config" for a checkpoint that is whole."""
    run, _ = _bridge_peft_run(tmp_path, hf_adapter=False)
    out = tmp_path / "out"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    line = one_error_line(err)
    assert code == 2 and "4 Megatron PEFT adapter tensor(s) and no base weights" in line, err
    assert "adapter.linear_in.weight" in line and "export_adapter.py" in line, line
    assert "saved with it" not in line and not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and "warning:" in stdout and "Megatron PEFT (LoRA) checkpoint" in stdout, (
        stdout + err
    )
    code, stdout, err = run_cli("ckpt", "validate", run, "--strict", "--json")
    report = json.loads(stdout)
    assert code == 1 and [f["severity"] for f in report["findings"]] == ["warning"], stdout


def test_the_peft_adapter_bridge_saved_beside_it_is_named(tmp_path):
    run, step = _bridge_peft_run(tmp_path, hf_adapter=True)
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out", "--json")
    failure = json.loads(stdout)
    assert code == 2 and failure["exit_code"] == 2, stdout + err
    assert failure["error"].endswith(f"a Hugging Face PEFT adapter saved with it: {step / 'hf'}")


def test_verl_adapter_beside_unmerged_base_weights_is_refused_naming_its_adapter(tmp_path):
    """verl's Megatron-FSDP save of a LoRA run: base weights and adapter in one DCP."""
    model = tiny_causal_lm("qwen2", vocab=500)
    weights = mcore_weights(model)
    run = tmp_path / "verl"
    actor = run / "global_step_5" / "actor"
    save_dcp({"model": {**weights, **_adapters(weights)}}, actor / "model" / "dist_ckpt")
    hf = actor / "model" / "huggingface"
    model.config.save_pretrained(hf)
    (hf / "adapter").mkdir()
    (hf / "adapter" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    (actor / "ckpt_contents.json").write_text(json.dumps({"schema_version": 2}))
    (run / "latest_checkpointed_iteration.txt").write_text("5")
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    line = one_error_line(err)
    assert code == 2 and "4 Megatron PEFT adapter tensor(s) beside the base weights" in line
    assert line.endswith(f"a Hugging Face PEFT adapter saved with it: {hf / 'adapter'}"), line
    assert not (tmp_path / "out").exists()


def test_an_adapter_config_linked_from_elsewhere_is_not_named(tmp_path):
    """Only a regular file inside the step counts as the saved adapter: a link there is
    not followed (the line names no directory it would lead a user to)."""
    run, step = _bridge_peft_run(tmp_path, hf_adapter=False)
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    (step / "hf").mkdir()
    (step / "hf" / "adapter_config.json").symlink_to(outside)
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    line = one_error_line(err)
    assert code == 2 and "Megatron PEFT" in line and "saved with it" not in line, err
