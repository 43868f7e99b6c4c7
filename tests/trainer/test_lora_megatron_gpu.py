"""LoRA under Megatron-FSDP on one GPU: each step's adapter gradients equal FSDP2's, no frozen
weight gets a gradient or changes, SFT learns, the checkpoint holds the adapter alone, a run
resumes from it, and the merged export computes what PEFT computes on the base
(1 GPU: pytest -m gpu tests/trainer/test_lora_megatron_gpu.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.lora import parse_adapter_key
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.export import fixed_inputs, logits_of
from tests.support.metrics import read_metrics
from tests.support.paths import REPO, repo_env
from tests.support.sft import launch_sft, write_chat_jsonl

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"),
]
LINEAR = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
ADAPTER_TENSORS = 2 * 2 * len(LINEAR)  # A and B on every linear layer of the tiny model's 2 layers
SETTINGS = (
    "trainer.total_steps=6",
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "optim.warmup_steps=0",
    "optim.lr=1e-2",
    "model.lora_rank=8",
    "model.lora_alpha=16",
)


def test_adapter_gradients_equal_fsdp2_and_the_base_stays_frozen():
    pytest.importorskip("megatron_fsdp")
    module = "tests.trainer.megatron_one_rank_grads"
    command = [sys.executable, "-m", module, "--micro-batches", "1", "2", "--lora-rank", "8"]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO, timeout=600, env=repo_env()
    )
    assert done.returncode == 0, done.stderr[-4000:]
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    print(reports)
    assert [(r["micro_batches"], r["step"]) for r in reports] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    for report in reports:
        assert report["compared"] == ADAPTER_TENSORS, report  # FSDP2: adapters alone have grads
        assert not report["missing"] and not report["extra"], report  # frozen: no gradient
        assert not report["frozen_changed"], report
        # bf16 compute in both; a gradient scaled by 2 reads a norm ratio of 2
        assert report["rel_err"] < 2e-2 and report["max_rel_err"] < 5e-2, report
        assert 0.98 < report["norm_ratio_min"] <= report["norm_ratio_max"] < 1.02, report


def _train(run_dir: Path, data: Path, base: Path, *extra: str) -> dict:
    summary, _ = launch_sft(
        data,
        run_dir,
        f"model.path={base}",
        "trainer.device=cuda",
        "strategy.name=megatron_fsdp",
        "strategy.mixed_precision=bf16",
        "trainer.eval_every=0",
        *SETTINGS,
        *extra,
    )
    return summary


def _losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in read_metrics(run_dir) if "train/loss" in r}


def test_lora_sft_learns_checkpoints_the_adapter_resumes_and_exports(tmp_path):
    pytest.importorskip("megatron_fsdp")
    from trainer.tiny import build_tiny_model_dir

    base = build_tiny_model_dir(tmp_path / "base", seed=0, with_weights=True)
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=64)
    straight, split = tmp_path / "straight", tmp_path / "split"
    _train(straight, data, base)
    first = _train(split, data, base, "trainer.stop_at_step=3")
    assert (first["resumed_from"], first["final_step"]) == (None, 3)
    second = _train(split, data, base)
    assert (second["resumed_from"], second["final_step"]) == (3, 6)

    losses, resumed = _losses(straight), _losses(split)
    print(losses, resumed)
    assert losses[6] < losses[1] - 0.3
    # A resume that lost the adapter or its Adam state would restart near step 1's loss.
    for step in (4, 5, 6):
        assert resumed[step] == pytest.approx(losses[step], rel=2e-2), (step, losses, resumed)

    reader = CheckpointReader(resolve_checkpoint(split).dist_ckpt)
    model_keys = [k for k in reader.tensors if k.startswith("model.")]
    parsed = [parse_adapter_key(k[len("model.") :]) for k in model_keys]
    assert all(parsed) and len(parsed) == ADAPTER_TENSORS, model_keys
    assert sorted({p.module.rsplit(".", 1)[-1] for p in parsed}) == LINEAR
    assert {reader.tensors[k].dtype.name for k in model_keys} == {"float32"}  # fp32 main weights
    moments = [k for k in reader.tensors if k.endswith((".exp_avg", ".exp_avg_sq"))]
    assert len(moments) == 2 * ADAPTER_TENSORS
    assert validate_checkpoint(split, deep=True).ok()

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from mfsdp_ckpt.convert.export_hf import export_hf

    merged, adapter = tmp_path / "merged", tmp_path / "adapter"
    assert not export_hf(split, merged, verify=True).mismatches
    export_hf(split, adapter, adapter_only=True, verify=True)
    config = json.loads((base / "config.json").read_text())
    inputs = fixed_inputs(config["vocab_size"])
    merged_logits = logits_of(merged, inputs, torch.float32)
    on_base = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32).eval()
    peft_model = PeftModel.from_pretrained(on_base, str(adapter)).eval()
    with torch.no_grad():
        peft_logits = peft_model(input_ids=inputs).logits
    assert torch.allclose(merged_logits, peft_logits, atol=1e-5, rtol=0)
    assert (merged_logits - logits_of(base, inputs, torch.float32)).abs().max() > 1e-2
