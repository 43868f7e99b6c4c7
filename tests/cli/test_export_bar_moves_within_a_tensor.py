"""`export-hf`'s bar moves by the bytes written, a window at a time
(`safetensors_writer.REPORTED_BYTES`, validate --deep's window), not only as each tensor
completes: its total is the bytes exported, and --json keeps stdout one JSON object (the
bar is on stderr, drawn or not by the rule validate's bar follows: `CallbackBar`).
Was: the bar moved per tensor, so one tensor of many GiB showed nothing for minutes.

The window is set small here so that the tiny model's embedding spans several."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from cli.main import main
from mfsdp_ckpt.storage import safetensors_writer
from tests.support.export import save_single_process_checkpoint
from trainer.progress import CallbackBar

WINDOW = 16 << 10


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("export_bar")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"), seed=1)
    return root / "run"


# a cast writes each converted piece; a copy in the stored dtype is the kernel's
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_bar_counts_bytes_within_a_tensor_up_to_the_bytes_exported(
    run_dir, tmp_path, monkeypatch, capsys, dtype
):
    monkeypatch.setattr(safetensors_writer, "REPORTED_BYTES", WINDOW)
    seen: list[tuple[int, int, str | None]] = []
    update = CallbackBar.update

    def recorded(bar: CallbackBar, done: int, total: int, postfix: str | None = None) -> None:
        if bar.desc == "export":
            seen.append((done, total, postfix))
        update(bar, done, total, postfix)

    monkeypatch.setattr(CallbackBar, "update", recorded)
    argv = ["ckpt", "export-hf", str(run_dir), "--out", str(tmp_path / "hf"), "--dtype", dtype]
    monkeypatch.setattr("sys.argv", ["mfsdp", *argv, "--json"])
    try:
        main()
    except SystemExit as stop:
        assert stop.code in (0, None)
    result = json.loads(capsys.readouterr().out)  # stdout: the one JSON object alone
    exported = sum(f.stat().st_size for f in (tmp_path / "hf").glob("*.safetensors"))
    assert exported > result["bytes"] > 0  # the files: the tensors and their headers
    assert seen[-1][:2] == (result["bytes"], result["bytes"]), seen[-1]
    assert [done for done, _, _ in seen] == sorted(done for done, _, _ in seen)
    steps = [now - before for (before, _, _), (now, _, _) in itertools.pairwise(seen)]
    assert steps and max(steps) <= WINDOW, max(steps)
    within = [a for a, b in itertools.pairwise(seen) if a[2] == b[2] and b[0] > a[0]]
    assert within, "no progress between two tensors"
