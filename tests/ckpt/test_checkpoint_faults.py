"""Damaged and hostile checkpoints: validate names each fault; nothing executes."""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.format import layout, run_steps
from mfsdp_ckpt.format.dcp_metadata import UnsafeMetadataError, load_metadata
from mfsdp_ckpt.storage.reader import CheckpointFormatError, CheckpointReader
from tests.support.ckpt_edits import RunsCode, biggest_shard, edit_manifest
from tests.support.distributed import run_distributed
from tests.support.fsdp_workloads import build, train_and_save


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    run_distributed(train_and_save, 2, str(root / "run"), 2, str(root / "state.pt"))
    return root / "run"


@pytest.fixture
def run(pristine, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(pristine, copy)
    return copy


def step_dir(run: Path) -> Path:
    return layout.step_dir(run, 2)


def errors(run: Path, deep: bool = False) -> list[str]:
    report = validate_checkpoint(run, deep=deep)
    return [str(f) for f in report.findings if f.severity == "error"]


def test_pristine_checkpoint_is_valid(run):
    assert errors(run, deep=True) == []


def test_truncated_shard(run):
    shard = biggest_shard(step_dir(run))
    shard.write_bytes(shard.read_bytes()[:-100])
    found = errors(run)
    assert any(shard.name in e and "truncated" in e for e in found), found


def test_flipped_byte_caught_by_deep(run):
    shard = biggest_shard(step_dir(run))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert errors(run, deep=False) == []  # same size: only hashing can tell
    found = errors(run, deep=True)
    assert any(shard.name in e and "xxh3_128 differs" in e for e in found), found


def test_deleted_shard(run):
    shard = biggest_shard(step_dir(run))
    shard.unlink()
    found = errors(run)
    assert any(shard.name in e and "missing" in e for e in found), found


def test_edited_manifest_size(run):
    data = json.loads((step_dir(run) / "manifest.json").read_text())
    name = next(n for n in data["files"] if n.endswith(".distcp"))

    def grow(data: dict) -> None:
        data["files"][name]["size"] += 1

    edit_manifest(step_dir(run), grow)
    found = errors(run)
    assert any(name.split("/")[-1] in e and "manifest says" in e for e in found), found


def test_manifest_not_json(run):
    (step_dir(run) / "manifest.json").write_text("{not json")
    found = errors(run)
    assert any("manifest.json" in e and "not valid JSON" in e for e in found), found


def test_manifest_path_traversal_refused(run):
    manifest_path = step_dir(run) / "manifest.json"
    data = json.loads(manifest_path.read_text())
    data["files"]["../../outside"] = {"size": 1, "sha256": "0" * 64}
    manifest_path.write_text(json.dumps(data))
    found = errors(run)
    assert any("escapes the checkpoint directory" in e for e in found), found


def test_tracker_naming_missing_step(run):
    (run / layout.TRACKER_FILE).write_text("7\n")
    found = errors(run)
    assert any(layout.TRACKER_FILE in e and "step 7" in e for e in found), found


def test_manifest_lists_optimizer_that_is_absent(tmp_path):
    model, _optimizer = build(sharded=False)
    from mfsdp_ckpt.checkpointer import Checkpointer
    from trainer.state import ModelState

    run = tmp_path / "run"
    Checkpointer(run, strategy="none").save(
        1, {"model": ModelState(model), "extra": {"step": 1}}, contents=("model", "extra")
    )
    edit_manifest(layout.step_dir(run, 1), lambda data: data["contents"].append("optimizer"))
    found = errors(run)
    assert any("'optimizer'" in e and "no optimizer state" in e for e in found), found


def test_unknown_file_is_a_warning_and_strict_fails(run):
    (step_dir(run) / "dist_ckpt" / "stray.bin").write_bytes(b"x")
    report = validate_checkpoint(run)
    assert report.ok() and not report.ok(strict=True)
    assert any("stray.bin" in f.where and "not listed" in f.message for f in report.findings)


def test_truncated_metadata(run):
    metadata = step_dir(run) / "dist_ckpt" / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:200])
    found = errors(run)
    assert any(".metadata" in e and "unreadable" in e for e in found), found


def test_metadata_that_would_run_code_is_refused(run, tmp_path):
    marker = tmp_path / "pwned"
    metadata = step_dir(run) / "dist_ckpt" / ".metadata"
    metadata.write_bytes(pickle.dumps(RunsCode(marker)))
    with pytest.raises(UnsafeMetadataError, match=r"refusing to load global (posix|os)\.system"):
        load_metadata(metadata)
    found = errors(run)
    assert any("refusing to load global" in e for e in found), found
    assert not marker.exists()


def test_blob_that_would_run_code_is_refused(run, tmp_path):
    """A .distcp blob crafted for a full unpickler: weights-only loading refuses it."""
    marker = tmp_path / "pwned"
    reader = CheckpointReader(step_dir(run) / "dist_ckpt")
    entry = reader.tensors["model.model.norm.weight"]
    chunk = next(c for c in entry.chunks if c.numel)
    buffer = io.BytesIO()
    torch.save(RunsCode(marker), buffer)
    payload = buffer.getvalue()
    shard = step_dir(run) / "dist_ckpt" / chunk.file
    data = bytearray(shard.read_bytes())
    data[chunk.file_offset : chunk.file_offset + chunk.length] = payload
    shard.write_bytes(bytes(data))
    hostile = dataclasses.replace(chunk, length=len(payload))  # later offsets moved: read this one
    with pytest.raises(CheckpointFormatError, match=r"refusing to load global (posix|os)\.system"):
        CheckpointReader(step_dir(run) / "dist_ckpt").read_chunk(entry, hostile)
    assert not marker.exists()


def test_symlink_out_of_checkpoint_is_refused(run, tmp_path):
    shard = biggest_shard(step_dir(run))
    outside = tmp_path / "outside.bin"
    outside.write_bytes(shard.read_bytes())
    shard.unlink()
    shard.symlink_to(outside)
    found = errors(run)
    assert any(shard.name in e and "outside the checkpoint" in e for e in found), found


def test_cli_exit_codes_and_json(run, tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["ckpt", "validate", str(run), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["valid"] is True
    biggest_shard(step_dir(run)).unlink()
    bad = runner.invoke(app, ["ckpt", "validate", str(run)])
    assert bad.exit_code == 1 and "INVALID" in bad.output
    usage = runner.invoke(app, ["ckpt", "validate", str(tmp_path / "nope")])
    assert usage.exit_code == 2 and "no such file" in usage.output


def test_a_tracked_step_damaged_after_its_save_stops_auto_resume(tmp_path):
    """The tracker is written once its step is complete: a tracked step that is there but
    lacks its manifest was damaged since, and auto resume fell back to an older step without
    a word (metrics.jsonl then held steps 4-6 twice). A tracked step that is gone (removed on
    purpose) still falls back to the newest complete one."""
    from mfsdp_ckpt.format import layout, run_steps, step_saving

    for step in (3, 6):
        layout.step_dir(tmp_path, step).mkdir()
    (layout.step_dir(tmp_path, 3) / layout.MANIFEST_FILE).write_text("{}")
    step_saving.write_tracker(tmp_path, 6)
    with pytest.raises(layout.DamagedRunDirError, match=r"names step 6, but .* holds no manifest"):
        run_steps.resume_step(tmp_path)
    layout.step_dir(tmp_path, 6).rmdir()
    assert run_steps.resume_step(tmp_path) == 3


# ------------------------------------------------------------- a save that fails part way
STATE = {"model": {"w": torch.ones(2)}}


def _tokenizer_on_a_full_disk(target: Path) -> None:
    """As `tokenizer.save_pretrained` fails on a full disk: the Rust writer's plain
    `Exception`, not an OSError, after part of the files was written."""
    (target / "tokenizer_config.json").write_text("{")
    raise Exception("No space left on device (os error 28)")


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_a_plain_exception_writing_huggingface_assets_fails_the_save_in_one_line(
    tmp_path, async_save
):
    """Was: a 60-line traceback (sync) or a line naming neither step nor file (async), and
    global_step_1.tmp left on the full disk. The Rust error names no file: the line names
    the dir being written (`write_hf_assets` names tokenizer.json itself)."""
    from mfsdp_ckpt.checkpoint_failures import CheckpointSaveError
    from mfsdp_ckpt.checkpointer import Checkpointer

    run = tmp_path / "run"
    saver = Checkpointer(run, strategy="none", async_save=async_save)
    with pytest.raises(CheckpointSaveError) as caught:
        saver.save(1, STATE, contents=("model",), hf_assets=_tokenizer_on_a_full_disk)
        saver.wait()
    assert str(caught.value) == (
        f"{run}/global_step_1.tmp: saving step 1 failed: {run}/global_step_1.tmp/huggingface:"
        " not written (No space left on device)"
    )
    assert sorted(p.name for p in run.iterdir()) == []


def test_a_tracker_that_cannot_be_replaced_says_the_step_was_saved(tmp_path, monkeypatch):
    """Was: "saving step 2 failed" though global_step_2 was complete and kept, and the
    tracker's temp file was left beside it for good."""
    import errno
    import os

    from mfsdp_ckpt.checkpoint_failures import TrackerNotUpdatedError
    from mfsdp_ckpt.checkpointer import Checkpointer

    run = tmp_path / "run"
    saver = Checkpointer(run, strategy="none")
    saver.save(1, STATE, contents=("model",))
    replace = os.replace

    def full_disk_at_the_tracker(src, dst, *args, **kwargs):
        if str(dst).endswith(layout.TRACKER_FILE):
            raise OSError(errno.ENOSPC, "No space left on device")
        return replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full_disk_at_the_tracker)
    with pytest.raises(TrackerNotUpdatedError) as caught:
        saver.save(2, STATE, contents=("model",))
    assert str(caught.value) == (
        f"{run}/latest_checkpointed_iteration.txt: step 2 was saved in {run}/global_step_2,"
        " but the tracker could not be updated (No space left on device);"
        f" give checkpoint.resume={run}/global_step_2 to continue from it"
        " (checkpoint.resume=auto reads the tracker: step 1)"
    )
    assert sorted(p.name for p in run.iterdir()) == [
        "global_step_1",
        "global_step_2",
        "latest_checkpointed_iteration.txt",
    ]
    assert run_steps.list_complete_steps(run) == [1, 2] and run_steps.resume_step(run) == 1


def test_a_save_that_failed_on_every_rank_is_said_once(tmp_path, monkeypatch, capsys):
    """DCP raises a failed write on every rank; each rank printed the same `error:` line
    (two lines under --nproc-per-node 2). Rank 0 says it; the others exit 1 quietly."""
    import signal

    from cli.errors import report_errors
    from mfsdp_ckpt.checkpoint_failures import CheckpointSaveError
    from mfsdp_ckpt.checkpointer import Checkpointer
    from mfsdp_ckpt.storage.dcp_writer import CheckedWriter

    def full_disk(self, plan, planner):
        raise OSError(f"{self.path}/__0_0.distcp: No space left on device")

    monkeypatch.setattr(CheckedWriter, "write_data", full_disk)
    run = tmp_path / "run"
    with pytest.raises(CheckpointSaveError) as caught:
        Checkpointer(run, strategy="none").save(3, STATE, contents=("model",))
    assert caught.value.every_rank and str(caught.value) == (
        f"{run}/global_step_3.tmp: saving step 3 failed: {run}/global_step_3.tmp/"
        "dist_ckpt/__0_0.distcp: No space left on device"
    )
    monkeypatch.setenv("MFSDP_CONFIG_CHECKED", "1")  # a rank `mfsdp train` launched
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    handler = signal.getsignal(signal.SIGINT)
    try:
        for rank, said in (("1", ""), ("0", f"error: {caught.value}\n")):
            monkeypatch.setenv("RANK", rank)
            with pytest.raises(SystemExit) as exited:
                report_errors(lambda: (_ for _ in ()).throw(caught.value))
            assert exited.value.code == 1 and capsys.readouterr().err == said
    finally:
        signal.signal(signal.SIGINT, handler)


def test_a_file_that_cannot_be_opened_mid_save_ends_its_writer_thread_quietly(tmp_path):
    """After Ctrl-C removed the temp dir, DCP's writer threads opening their next file
    printed `Exception in thread ... RuntimeError: generator didn't yield` below the run's
    one line: the failure is recorded, and the thread writes on into a sink."""
    import os

    from mfsdp_ckpt.storage.dcp_writer import CheckedFileSystem

    fs = CheckedFileSystem()
    fs.capturing = True
    gone = tmp_path / "global_step_3.tmp" / "dist_ckpt" / "__0_1.distcp"
    with fs.create_stream(gone, "wb") as stream:
        stream.write(b"tensor bytes")
        os.fsync(stream.fileno())  # as the writer thread does: fails on the sink, ignored
    assert [(path, type(err)) for path, err in fs.failures] == [(str(gone), FileNotFoundError)]
    assert fs.written == {} and not gone.parent.exists()


def test_an_async_save_whose_thread_cannot_start_fails_and_leaves_nothing_to_wait_for(
    tmp_path, monkeypatch
):
    """`Thread.start` failing (a container's pids limit: "can't start new thread") raises
    from `save`; the save is not left in flight, so `wait` and `settle` return at once (a
    thread recorded before it started was waited for forever, with Ctrl-C and SIGTERM
    deferred: only SIGKILL ended the run)."""
    import threading

    from mfsdp_ckpt.checkpointer import Checkpointer

    start = threading.Thread.start

    def refuse_the_save_thread(thread: threading.Thread) -> None:
        if getattr(thread, "_target", None) is not None and "_save_in_background" in str(
            thread._target
        ):
            raise RuntimeError("can't start new thread")
        start(thread)

    saver = Checkpointer(tmp_path / "run", strategy="none", async_save=True)
    monkeypatch.setattr(threading.Thread, "start", refuse_the_save_thread)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        saver.save(1, STATE, contents=("model",))
    monkeypatch.setattr(threading.Thread, "start", start)
    waited = threading.Thread(target=lambda: (saver.wait(), saver.settle()), daemon=True)
    waited.start()
    waited.join(timeout=30)
    assert not waited.is_alive()
