"""Megatron-FSDP SFT on 2 GPUs (run on a 2-GPU machine:
pytest -m gpu tests/trainer/test_sft_megatron_gpu.py).

Trains the tiny model with strategy megatron_fsdp under torchrun, checks the loss falls,
resumes, validates the checkpoint, exports it, and checks that its keys are the ones an
FSDP2 run writes, and that the first-step loss matches FSDP2's (bf16 tolerance).
"""

import pytest
import torch

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.metrics import read_metrics
from tests.support.sft import launch_sft, write_chat_jsonl

pytestmark = pytest.mark.gpu


def _train(run_dir, data, strategy, *extra):
    summary, _ = launch_sft(
        data,
        run_dir,
        "trainer.device=cuda",
        f"strategy.name={strategy}",
        "strategy.mixed_precision=bf16",
        *extra,
        nproc=2,
        timeout=900,
    )
    return summary


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_megatron_fsdp_sft_trains_resumes_and_matches_fsdp2_names(tmp_path):
    pytest.importorskip("megatron_fsdp")
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=96)
    run = tmp_path / "mfsdp"
    first = _train(run, data, "megatron_fsdp", "trainer.total_steps=12", "trainer.stop_at_step=8")
    assert first["final_step"] == 8
    second = _train(run, data, "megatron_fsdp", "trainer.total_steps=12")
    assert (second["resumed_from"], second["final_step"]) == (8, 12)
    losses = {r["step"]: r["train/loss"] for r in read_metrics(run) if "train/loss" in r}
    assert losses[12] < losses[1] - 0.5
    assert validate_checkpoint(run, deep=True).ok()

    reference = tmp_path / "fsdp2"
    _train(reference, data, "fsdp2", "trainer.total_steps=12", "trainer.stop_at_step=1")
    ours = CheckpointReader(run / "global_step_12" / "dist_ckpt").tensors
    theirs = CheckpointReader(reference / "global_step_1" / "dist_ckpt").tensors
    model_keys = lambda tensors: sorted(k for k in tensors if k.startswith("model."))  # noqa: E731
    assert model_keys(ours) == model_keys(theirs)
    assert (
        ours["model.model.embed_tokens.weight"].dtype.name == "float32"
    )  # fp32 main weights are saved
    fsdp2_first = next(r["train/loss"] for r in read_metrics(reference) if r["step"] == 1)
    assert losses[1] == pytest.approx(fsdp2_first, rel=2e-2)

    from mfsdp_ckpt.convert.export_hf import export_hf

    result = export_hf(run, tmp_path / "hf", verify=True)
    assert not result.mismatches
