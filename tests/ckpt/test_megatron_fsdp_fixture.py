"""A checkpoint written by real Megatron-FSDP on 2xH200, read here on CPU.

The fixture (tests/fixtures/megatron_fsdp_qwen2, made by make_fixture.py there) holds
uneven shards as Megatron-FSDP lays them out. Its provenance.json records float64 sums of
every tensor, all-reduced on the GPUs from the live local shards; the offline reader must
reproduce each one from the files.
"""

from __future__ import annotations

import json

import pytest

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.format import checkpoint_resolution
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "megatron_fsdp_qwen2"
PROVENANCE = json.loads((FIXTURE / "provenance.json").read_text())


def test_fixture_validates_deep():
    report = validate_checkpoint(FIXTURE / "run", deep=True)
    assert report.ok(strict=True), [str(f) for f in report.findings]
    assert report.step == 2 and report.tensors == 105


def test_fixture_has_uneven_shards():
    reader = CheckpointReader(checkpoint_resolution.resolve_checkpoint(FIXTURE / "run").dist_ckpt)
    uneven = [e for e in reader.tensors.values() if len({c.sizes for c in e.chunks}) > 1]
    whole_on_one_rank = [e for e in reader.tensors.values() if len(e.chunks) == 1 and e.numel > 1]
    assert uneven and whole_on_one_rank


@pytest.mark.parametrize("kind", ["model", "optimizer"])
def test_every_tensor_matches_sums_recorded_on_gpu(kind):
    reader = CheckpointReader(checkpoint_resolution.resolve_checkpoint(FIXTURE / "run").dist_ckpt)
    recorded = {k: v for k, v in PROVENANCE["sums"].items() if k.startswith(kind)}
    assert len(recorded) > 20
    for name, (total, absolute) in recorded.items():
        tensor = reader.read_tensor(name).double()
        assert tensor.sum().item() == pytest.approx(total, rel=1e-9, abs=1e-9), name
        assert tensor.abs().sum().item() == pytest.approx(absolute, rel=1e-9), name


def test_adam_step_counter_shows_the_upstream_init_step():
    """megatron-fsdp 0.6.1 runs one synthetic optimizer step at setup: after 2 real steps the
    saved Adam step is 3. The trainer corrects for this; the fixture documents the raw value."""
    reader = CheckpointReader(checkpoint_resolution.resolve_checkpoint(FIXTURE / "run").dist_ckpt)
    steps = {reader.read_tensor(k).item() for k in reader.tensors if k.endswith(".step")}
    assert steps == {len(PROVENANCE["losses"]) + 1}


def test_export_reproduces_logits_megatron_fsdp_computed_on_gpu(tmp_path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from mfsdp_ckpt.convert.export_hf import export_hf

    result = export_hf(FIXTURE / "run", tmp_path / "hf", dtype="fp32", verify=True)
    assert result.mismatches == []
    recorded = load_file(FIXTURE / "logits.safetensors")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=recorded["input_ids"]).logits
    torch.testing.assert_close(logits, recorded["logits"], rtol=0, atol=1e-4)
