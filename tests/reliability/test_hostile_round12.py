"""Hostile inputs and surroundings the earlier rounds left open:

* a working directory deleted while a shell was in it: a relative --out (export-hf,
  import-hf, `mfsdp data`) failed with errno's bare "[Errno 2] No such file or directory"
  (exit 1, no name; under --json too), and `mfsdp train` died in torch's import with MKL's
  "Cannot load libtorch_cpu.so" and no `error:` line. Every command now stops first,
  naming the directory (exit 2);
* a safetensors header longer than MAX_HEADER_BYTES in a file large enough to hold it was
  refused as "does not fit the file", which it did: the line now names the cap.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from mfsdp_ckpt.storage.safetensors_source import MAX_HEADER_BYTES
from tests.reliability.hf_model import hf_model
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.paths import FIXTURES, REPO

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"

# mfsdp's entry point, started in `gone`, which is removed before the command runs (as when
# a shell's directory is deleted from another one).
IN_A_DELETED_DIR = """
import os, sys
sys.path.insert(0, {repo!r})
from cli.main import main
os.chdir({gone!r})
os.rmdir({gone!r})
sys.argv[0] = "mfsdp"
main()
"""


def _in_deleted_dir(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    gone = tmp_path / "gone"
    gone.mkdir()
    code = IN_A_DELETED_DIR.format(repo=str(REPO), gone=str(gone))
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


DELETED_DIR_COMMANDS = {
    "export-relative-out": ("ckpt", "export-hf", str(RUN), "--out", "hf"),
    "data-relative-out": ("data", "synthetic", "--out", "data"),
    "train": ("train", "sft", "--config", str(REPO / "examples" / "sft_tiny_cpu.yaml")),
    "validate": ("ckpt", "validate", str(RUN)),
}


@pytest.mark.parametrize("case", list(DELETED_DIR_COMMANDS))
def test_a_deleted_working_directory_is_named_before_any_work(tmp_path, case):
    done = _in_deleted_dir(tmp_path, *DELETED_DIR_COMMANDS[case])
    assert done.returncode == 2, done.stdout + done.stderr
    one_error(done.stderr, str(tmp_path / "gone"), "working directory was deleted")
    assert done.stdout == ""


def test_a_deleted_working_directory_under_json_is_one_json_object(tmp_path):
    done = _in_deleted_dir(tmp_path, "ckpt", "export-hf", str(RUN), "--out", "hf", "--json")
    assert done.returncode == 2, done.stderr
    reply = json.loads(done.stdout)
    assert reply["exit_code"] == 2 and str(tmp_path / "gone") in reply["error"]


def test_an_existing_working_directory_still_takes_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("ckpt", "export-hf", RUN, "--out", "hf")
    assert code == 0, out + err
    assert (tmp_path / "hf" / "config.json").is_file()


# --------------------------------------------------------------------------- safetensors header
def test_a_header_over_the_cap_is_named_as_over_the_cap(tmp_path):
    """Was: "header length N does not fit the file", of a file that holds it."""
    model = hf_model(tmp_path)
    weights = model / "model.safetensors"
    length = MAX_HEADER_BYTES + 8
    weights.write_bytes(struct.pack("<Q", length))
    os.truncate(weights, 8 + length + 64)  # sparse: no disk used, never read
    code, out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 1, out + err
    line = one_error_line(err)
    assert str(weights) in line and f"header of {length} bytes, more than the" in line, line
    assert not (tmp_path / "out").exists()


def test_a_header_longer_than_its_file_is_still_named_as_not_fitting(tmp_path):
    model = hf_model(tmp_path)
    weights = model / "model.safetensors"
    weights.write_bytes(struct.pack("<Q", 1 << 62) + weights.read_bytes()[8:])
    code, out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 1, out + err
    assert f"header length {1 << 62} does not fit the file" in one_error_line(err)
