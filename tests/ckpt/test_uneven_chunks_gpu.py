"""mfsdp's single-gather chunk offsets equal Megatron-FSDP's per-tensor ones on a real
Megatron-FSDP model (2 GPUs: pytest -m gpu tests/ckpt/test_uneven_chunks_gpu.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.support.paths import REPO, repo_env

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_offsets_match_megatron_fsdp_for_model_and_adam_state(tmp_path):
    pytest.importorskip("megatron_fsdp")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "-m",
        "tests.ckpt.megatron_chunk_offsets",
        str(tmp_path),
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env=repo_env(),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    reports = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    print(reports)
    for report in reports:
        assert report["compared"] > 20 and report["mismatches"] == {}, report
    assert sum(r["empty_pieces"] for r in reports) > 0, (
        "no empty shard: the uneven case went untested"
    )
