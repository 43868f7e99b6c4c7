"""Ctrl-C during export-hf takes effect a window after it, not once every tensor being
written is whole.

Was: the stop was checked only before a tensor started, and Ctrl-C waited for each thread
to copy or cast the whole tensor it had begun (minutes for one of many GiB), then threw
that work away. Now each window the writer lands (`report_writes`) checks it, so the
tensor's remaining windows are never written; the output is left nowhere, as before.

The window is set small here so that the tiny model's embedding spans several; the
signal is sent from the bar's callback, in the writing thread, as the first window of
the first tensor lands."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from mfsdp_ckpt.convert import export_write
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.convert.export_scheduler import StopFlag
from mfsdp_ckpt.storage import safetensors_writer
from tests.support.export import save_single_process_checkpoint
from tests.support.hf_model_files import hidden_leftovers

WINDOW = 16 << 10


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("export_stop")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"), seed=1)
    return root / "run"


# a cast writes each converted piece; a copy in the stored dtype is the kernel's
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_ctrl_c_stops_the_tensor_being_written_after_its_window(
    run_dir, tmp_path, monkeypatch, dtype
):
    monkeypatch.setattr(safetensors_writer, "REPORTED_BYTES", WINDOW)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    heard: list[tuple[int, int]] = []
    flags: list[StopFlag] = []

    class SeenFlag(StopFlag):  # the export's own flag, kept so the signal's effect is awaited
        def __init__(self) -> None:
            super().__init__()
            flags.append(self)

    monkeypatch.setattr(export_write, "StopFlag", SeenFlag)

    def progress(tensors: int, _total: int, nbytes: int, total_bytes: int) -> None:
        heard.append((tensors, nbytes))
        if len(heard) == 1:
            assert nbytes < total_bytes // 4, "the first tensor spans one window"
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: the main thread gets it
            # its handler stops the run meanwhile, as a window takes on a large tensor
            assert flags[0].wait(30), "the run was not stopped after Ctrl-C"

    out = tmp_path / "hf"
    try:
        with pytest.raises(KeyboardInterrupt):
            export_hf(run_dir, out, dtype=dtype, workers=1, progress=progress)
    finally:
        signal.signal(signal.SIGINT, previous)
    # was: every window of the tensor being written, heard after the Ctrl-C
    assert heard == heard[:1], f"{len(heard) - 1} windows written after Ctrl-C"
    assert not out.exists()
    assert hidden_leftovers(tmp_path) == []
