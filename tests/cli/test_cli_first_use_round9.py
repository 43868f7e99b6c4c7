"""What a first-time user still hit: two `mfsdp data` runs into one --out interleaving their
tables, help examples that name options, keys or directories that do not exist, a LoRA
`inspect --deep` silent while it hashes the base model, and empty path overrides that
silently meant "no path"."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO

# ------------------------------------------------------------------ one writer per data --out

HOLD_LOCK = """
import sys, time
from mfsdp_ckpt.storage.out_lock import out_lock
with out_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def _hold_lock(out: Path) -> subprocess.Popen:
    """Another live process holding --out's lock, as a running `mfsdp data` does."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def _tables(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


def _lock_files(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.endswith(".out-lock"))


def test_a_second_data_run_into_one_out_stops_at_once_and_leaves_the_first_intact(tmp_path):
    out = tmp_path / "addition"
    assert mfsdp("data", "synthetic", "--out", str(out)).returncode == 0
    before = _tables(out)
    holder = _hold_lock(out)
    try:
        started = time.monotonic()
        second = mfsdp("data", "synthetic", "--out", str(out), "--seed", "1")
        assert time.monotonic() - started < 30
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 1, second.stderr
    assert second.stderr == (
        f"error: {out}: another command is writing it (pid {holder.pid}); wait for it or "
        "choose another --out\n"
    )
    assert _tables(out) == before


def test_a_second_data_run_under_json_prints_the_busy_error_object(tmp_path):
    out = tmp_path / "addition"
    holder = _hold_lock(out)
    try:
        second = mfsdp("data", "synthetic", "--out", str(out), "--json")
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 1
    assert json.loads(second.stdout)["exit_code"] == 1
    assert f"{out}: another command is writing it" in json.loads(second.stdout)["error"]


def test_a_lock_left_by_a_killed_run_does_not_block_the_next_and_is_removed(tmp_path):
    out = tmp_path / "addition"
    holder = _hold_lock(out)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert _lock_files(tmp_path) == [".addition.out-lock"]  # what SIGKILL leaves behind
    done = mfsdp("data", "synthetic", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert _lock_files(tmp_path) == [] and (out / "rl" / "train.parquet").is_file()


def test_no_lock_file_is_left_after_a_failed_data_run(tmp_path):
    source = tmp_path / "train.jsonl"
    source.write_text(json.dumps({"question": "1 + 2?"}) + "\n")  # no answer column
    done = mfsdp("data", "gsm8k", "--input", str(source), "--out", str(tmp_path / "out"))
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert _lock_files(tmp_path) == []


def test_no_lock_file_is_left_after_ctrl_c_during_a_data_run(tmp_path):
    source = tmp_path / "train.jsonl"
    row = json.dumps({"question": "1 + 2?", "answer": "1 + 2 = 3\n#### 3"}) + "\n"
    source.write_text(row * 400_000)  # seconds of converting: time to press Ctrl-C
    run = subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "data", "gsm8k"]
        + ["--input", str(source), "--out", str(tmp_path / "out")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not _lock_files(tmp_path):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.02)
    run.send_signal(signal.SIGINT)
    _out, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    assert _lock_files(tmp_path) == [] and not (tmp_path / "out" / "rl").exists()
