"""Export real Megatron-core fsdp_dtensor checkpoints (made on GPUs by
tests/fixtures/mcore/make_mcore_fixtures.py) and match Megatron-core's own logits.

Parametrized over the fixture directories present; each holds dist_ckpt/ (2-rank DCP as
Megatron-LM writes it), config.json, logits.pt and provenance.json. The Megatron-LM run
dirs with distributed-Adam state (tests/fixtures/mcore_optim/, made by
make_mcore_optim_fixture.py) are exported from their run dir, through the tracker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.convert.export_hf import export_hf
from tests.support.export import load_report, logits_of
from tests.support.paths import FIXTURES

MCORE = FIXTURES / "mcore"
FAMILY_DIRS = (
    sorted(p for p in MCORE.iterdir() if (p / "dist_ckpt" / ".metadata").is_file())
    if MCORE.is_dir()
    else []
)
OPTIM_FIXTURES = FIXTURES / "mcore_optim"
RUN_DIRS = (
    sorted(p for p in OPTIM_FIXTURES.iterdir() if (p / "run").is_dir())
    if OPTIM_FIXTURES.is_dir()
    else []
)


@pytest.mark.parametrize("family_dir", FAMILY_DIRS, ids=[p.name for p in FAMILY_DIRS])
def test_megatron_core_checkpoint_exports_to_its_logits(family_dir: Path, tmp_path):
    provenance = json.loads((family_dir / "provenance.json").read_text())
    assert any(key.endswith("linear_qkv.weight") for key in provenance["model_keys"])
    out = tmp_path / "hf"
    result = export_hf(
        family_dir / "dist_ckpt",
        out,
        hf_config=family_dir / "config.json",
        dtype="fp32",
        verify=True,
    )
    assert result.layout == "mcore" and result.mismatches == []
    assert load_report(out) == {}
    recorded = torch.load(family_dir / "logits.pt")
    exported = logits_of(out, recorded["input_ids"])
    torch.testing.assert_close(exported, recorded["logits"].float(), rtol=0, atol=1e-4)


@pytest.mark.parametrize("family_dir", RUN_DIRS, ids=[p.name for p in RUN_DIRS])
def test_megatron_lm_run_with_optimizer_exports_to_its_logits(family_dir: Path, tmp_path):
    out = tmp_path / "hf"
    result = export_hf(
        family_dir / "run", out, hf_config=family_dir / "config.json", dtype="fp32", verify=True
    )
    assert result.layout == "mcore" and result.mismatches == []
    recorded = torch.load(family_dir / "logits.pt")
    exported = logits_of(out, recorded["input_ids"])
    torch.testing.assert_close(exported, recorded["logits"].float(), rtol=0, atol=1e-4)
