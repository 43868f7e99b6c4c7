"""validate --json's findings are cut as its stderr lines are (`printable.cut_to`): a tensor
named with 1 MiB of characters gave a 1 MiB `message` in the JSON while the stderr line
said ~2,000 characters of it."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.check.printable import MAX_PRINTED_CHARS
from tests.support.interop_layouts import run_cli


def test_a_findings_message_is_no_longer_than_its_stderr_line(tmp_path: Path):
    """Adam state under a 1 MiB name that matches no parameter: a warning naming it."""
    long = "model." + "a" * (1 << 20)
    state = {
        "model.w": torch.zeros(4),
        "optimizer.state.model.w.exp_avg": torch.zeros(4),
        f"optimizer.state.{long}.exp_avg": torch.zeros(4),
    }
    dcp.save(state, checkpoint_id=tmp_path / "dist_ckpt", no_dist=True)
    _code, stdout, err = run_cli("ckpt", "validate", tmp_path / "dist_ckpt", "--json")
    findings = json.loads(stdout)["findings"]
    assert any("aaaa" in f["message"] + f["where"] for f in findings), err[:3000]
    longest = max(len(f["message"]) + len(f["where"]) for f in findings)
    assert longest < 2 * MAX_PRINTED_CHARS + 100, longest
