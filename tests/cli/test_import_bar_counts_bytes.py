"""`import-hf`'s bar counts bytes, as export-hf's does, and moves within a tensor as it is
cast (a window at a time, `import_cast`): its total is the bytes imported.
Was: it counted tensors, largest first, so a model whose embedding and head are GiB each
showed "2 tensors of 11 (18%), 0.0 tensors/s, 4m08s left" for most of the import.

The cast window is set small here so that the tiny model's embedding spans several."""

from __future__ import annotations

import itertools
import json

from cli.main import main
from mfsdp_ckpt.convert import import_cast
from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.storage import dcp_stream_writer
from tests.support.hf_model_files import saved_hf_model
from trainer.progress import CallbackBar

WINDOW = 1 << 10  # source bytes: 2 KiB of the output, bf16 cast to fp32


def test_the_import_bar_counts_bytes_within_a_tensor(tmp_path, monkeypatch, capsys):
    model = saved_hf_model(tmp_path, "qwen2", tied=False)
    monkeypatch.setattr(import_cast, "CAST_WINDOW_BYTES", WINDOW)
    seen: list[tuple[int, int, str | None]] = []
    update = CallbackBar.update

    def recorded(bar: CallbackBar, done: int, total: int, postfix: str | None = None) -> None:
        if bar.desc == "import":
            assert bar.unit == "B", bar.unit
            seen.append((done, total, postfix))
        update(bar, done, total, postfix)

    monkeypatch.setattr(CallbackBar, "update", recorded)
    argv = ["ckpt", "import-hf", str(model), "--out", str(tmp_path / "out"), "--dtype", "fp32"]
    monkeypatch.setattr("sys.argv", ["mfsdp", *argv, "--json"])
    try:
        main()
    except SystemExit as stop:
        assert stop.code in (0, None)
    result = json.loads(capsys.readouterr().out)  # stdout: the one JSON object alone
    assert seen[-1][:2] == (result["bytes"], result["bytes"]), seen[-1]
    assert [done for done, _, _ in seen] == sorted(done for done, _, _ in seen)
    steps = [now - before for (before, _, _), (now, _, _) in itertools.pairwise(seen)]
    assert steps and max(steps) <= 2 * WINDOW, max(steps)
    within = [a for a, b in itertools.pairwise(seen) if a[2] == b[2] and b[0] > a[0]]
    assert within, "no progress within a tensor"


def test_bytes_copied_as_stored_count_a_window_at_a_time(tmp_path, monkeypatch):
    """--dtype auto copies a tensor's bytes file to file on the data file's thread, a
    writeback window at a time: what `written()` reports (and the bar shows while the
    import waits for the threads) grows with each window, not once the tensor is whole."""
    source = tmp_path / "source.bin"
    source.write_bytes(bytes(range(256)) * 32)  # 8 KiB: 8 windows of WINDOW bytes
    monkeypatch.setattr(dcp_stream_writer, "WRITEBACK_BYTES", WINDOW)
    writer = dcp_stream_writer.StreamingDcpWriter(tmp_path / "dcp", threads=1)
    seen: list[tuple[int, int]] = []
    copy = dcp_stream_writer.copy_bytes

    def heard(*args: object) -> None:
        copy(*args)
        seen.append(writer.written())

    monkeypatch.setattr(dcp_stream_writer, "copy_bytes", heard)
    ranges = [dcp_stream_writer.SourceRange(source, 0, 8 * WINDOW)]
    writer.add_raw(("w",), BY_NAME["uint8"], (8 * WINDOW,), ranges)
    writer.finish()
    # heard as each window is copied: the windows before it count, the tensor not yet whole
    assert seen == [(0, WINDOW * n) for n in range(8)], seen
    assert writer.written() == (1, 8 * WINDOW)
