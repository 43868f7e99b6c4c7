"""A Megatron run dir without a tracker whose newest iter_N/ is a torch_dist save that did
not finish: validate, inspect and export-hf each name that save by its path and what it
lacks (the metadata.json megatron-core writes last), and offer the older complete step as
the newest complete one.

Was: with the older step in a format mfsdp does not read, the refusal called it "the
newest" and never named the unfinished save; with one it reads, the unfinished save was
named without its path or why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.format.unfinished_torch_dist import UNFINISHED_TORCH_DIST_LACKS
from tests.ckpt.test_unfinished_torch_dist_named import _torch_dist_save
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp

TXT = "latest_checkpointed_iteration.txt"
COMMANDS = (["validate"], ["validate", "--json"], ["inspect"], ["export-hf"])


def _run(tmp_path: Path, older: str) -> Path:
    """RUN/iter_0000100/ complete (fsdp_dtensor, or a torch_dist save mfsdp does not read)
    and RUN/iter_0000200/ a torch_dist save stopped before its metadata.json; no tracker."""
    run = tmp_path / "run"
    if older == "fsdp_dtensor":
        save_dcp({"iteration": 100, "model": {"w": torch.zeros(2)}}, run / "iter_0000100")
    else:
        step = _torch_dist_save(run / "iter_0000100")
        (step / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist"}))
    _torch_dist_save(run / "iter_0000200")
    return run


def _said(run: Path, tmp_path: Path) -> list[str]:
    """The one error line of each command, run on `run` (the same line everywhere)."""
    lines = []
    for command in COMMANDS:
        extra = ["--out", tmp_path / "hf"] if command[0] == "export-hf" else []
        code, out, err = run_cli("ckpt", *command, run, *extra)
        found = json.loads(out)["error"] if "--json" in command else None
        line = one_error_line(err)
        assert code == 2 and (found is None or line == f"error: {found}"), (command, out, err)
        lines.append(line)
    assert len(set(lines)) == 1, lines
    return lines


UNFINISHED = f"is a save that did not finish (it holds no {UNFINISHED_TORCH_DIST_LACKS})"


@pytest.mark.parametrize("older", ["fsdp_dtensor", "torch_dist"])
def test_the_unfinished_newest_save_is_named_and_the_older_offered(older, tmp_path):
    run = _run(tmp_path, older)
    line = _said(run, tmp_path)[0]
    assert f"{run / 'iter_0000200'} {UNFINISHED}" in line, line
    if older == "fsdp_dtensor":
        assert "give one of them (iter_0000100 (the newest complete one); " in line, line
    else:
        assert f"the newest complete one: {run / 'iter_0000100'}: a Megatron" in line, line
        assert "the newest: " not in line, line
