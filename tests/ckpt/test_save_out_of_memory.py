"""A save that runs out of memory is the CLI's out-of-memory line (exit 1, what frees enough),
not "saving step N failed: MemoryError": DCP gathers a writer's failure into its own
exception, and the save wrapped that as a failed save of the step.

The failure is real: a state whose pickling allocates more than any machine has."""

from __future__ import annotations

import signal

import pytest
import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from tests.support.cli_errors import one_error


class _NeedsMemory:
    """A saved object whose pickle asks for 4 EiB."""

    def __reduce__(self) -> tuple:
        return (bytes, (bytearray(1 << 62),))


def _save(run_dir) -> None:
    Checkpointer(run_dir, strategy="none").save(
        1,
        {"model": {"w": torch.ones(2)}, "extra": {"state": _NeedsMemory()}},
        contents=("model", "extra"),
    )


def test_a_save_out_of_memory_raises_the_memory_failure(tmp_path):
    with pytest.raises(MemoryError):
        _save(tmp_path / "run")
    assert not (tmp_path / "run" / "global_step_1.tmp").exists()


def test_a_save_out_of_memory_is_the_out_of_memory_line(tmp_path, capsys):
    from cli.errors import report_errors

    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exited:
            report_errors(lambda: _save(tmp_path / "run"))
    finally:
        signal.signal(signal.SIGINT, handler)
    assert exited.value.code == 1
    line = one_error(capsys.readouterr().err, "error: out of memory", "ulimit -v")
    assert "saving step" not in line


def test_a_save_out_of_memory_on_every_rank_is_said_once(monkeypatch, capsys):
    """DCP raises the writer's failure on every rank: each rank printed the same
    out-of-memory line (two under --nproc-per-node 2). Rank 0 says it; the others exit 1
    quietly, having told torchrun's report."""

    from cli.errors import report_errors

    monkeypatch.setenv("MFSDP_CONFIG_CHECKED", "1")  # a rank `mfsdp train` launched
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    handler = signal.getsignal(signal.SIGINT)

    def out_of_memory():
        bytearray(1 << 62)  # a real allocation failure

    try:
        for rank in ("1", "0"):
            monkeypatch.setenv("RANK", rank)
            with pytest.raises(SystemExit) as exited:
                report_errors(out_of_memory)
            said = capsys.readouterr().err
            assert exited.value.code == 1
            assert (said == "") if rank == "1" else said.startswith("error: out of memory")
    finally:
        signal.signal(signal.SIGINT, handler)
