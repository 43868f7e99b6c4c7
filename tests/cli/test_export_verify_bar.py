"""`export-hf --verify` draws a bar while it compares the export with the checkpoint (it
reads and converts every tensor again, as long as the export took), labelled, after the
export's own, on a terminal (on stderr under --json too: stdout stays one JSON object).
Was: the verify phase, most of the command's time, showed nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main
from mfsdp_ckpt.convert.export_hf import export_hf
from tests.support.export import save_single_process_checkpoint
from tests.support.terminal import Terminal


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("verify_bar")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"), seed=1)
    return root / "run"


def test_verify_reports_every_tensor_and_byte_it_compares(run_dir, tmp_path):
    calls: list[tuple[int, int, int, int]] = []
    result = export_hf(
        run_dir,
        tmp_path / "hf",
        verify=True,
        max_shard_size=200_000,  # several files: the count runs on over them
        verify_progress=lambda *call: calls.append(call),
    )
    assert result.mismatches == [] and len(result.files) > 1
    tensors, total_tensors, done, total = calls[-1]
    assert (tensors, done) == (total_tensors, total) == (result.tensors, result.bytes)
    assert [call[2] for call in calls] == sorted(call[2] for call in calls)


@pytest.mark.parametrize("as_json", [False, True], ids=["terminal", "json"])
def test_verify_draws_a_labelled_bar_after_the_exports(
    run_dir, tmp_path, monkeypatch, capsys, as_json
):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    argv = ["ckpt", "export-hf", str(run_dir), "--out", str(tmp_path / "hf"), "--verify"]
    monkeypatch.setattr("sys.argv", ["mfsdp", *argv, *(["--json"] if as_json else [])])
    try:
        main()
    except SystemExit as stop:
        assert stop.code in (0, None)
    stdout = capsys.readouterr().out
    bars = [line for line in terminal.getvalue().split("\r") if "%|" in line]
    if as_json:
        assert json.loads(stdout)["mismatches"] == []
    export = [i for i, bar in enumerate(bars) if bar.startswith("export:")]
    verify = [i for i, bar in enumerate(bars) if bar.startswith("verify:")]
    assert export and verify and max(export) < min(verify), bars
    total = bars[export[0]].split("/", 1)[1].split(" ", 1)[0]  # the bytes of the tensors
    assert f"/{total} [" in bars[verify[0]], bars
