"""Paths the commands met as tracebacks or in other words than the rest: the root directory
(`/`, `/tmp/..`, `file:///`: `ckpt validate "$CKPT/"` with CKPT unset) was a traceback from
the run-dir lock with exit 1 and, under --json, nothing on stdout; `5iB` as
--max-shard-size was a KeyError; a pipe given as a
file (`cat x | mfsdp config from-verl /dev/stdin`) was "file is missing"; and a config that
is no regular file was not said to be a device, as every other such file is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.convert.import_hf import import_hf
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.lock_holder import lock_holder
from tests.support.hf_model_files import saved_hf_model
from tests.support.paths import REPO


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("root_paths")
    import_hf(saved_hf_model(root, "qwen2", tied=True), root / "run", layout_name="hf")
    return root / "run"


def _json_error(*args: object) -> dict:
    """`mfsdp ARGS --json`, which must fail as bad usage in one error line and one object."""
    done = CliRunner().invoke(app, [*map(str, args), "--json"])
    assert done.exit_code == 2, done.output
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    said = json.loads(done.stdout)
    assert said["exit_code"] == 2 and f"error: {said['error']}\n" == done.stderr
    return said


@pytest.mark.parametrize("root", ["/", "/tmp/..", "//"])
@pytest.mark.parametrize("command", ["validate", "inspect", "export-hf"])
def test_the_root_is_not_a_checkpoint(tmp_path, root, command):
    out = ["--out", tmp_path / "x"] if command == "export-hf" else []
    said = _json_error("ckpt", command, root, *out)
    assert said["error"].startswith(f"{os.path.normpath(root)}: not a checkpoint (looked for")
    assert lock_holder(root) is None


def test_the_root_as_a_file_url_is_not_a_checkpoint(tmp_path):
    said = _json_error("ckpt", "export-hf", "file:///", "--out", tmp_path / "x")
    assert said["error"].startswith("file:///: not a checkpoint (no .metadata")


def test_the_root_as_hf_config_is_no_model_dir(run):
    said = _json_error("ckpt", "validate", run, "--hf-config", "/")
    assert said["error"].startswith("--hf-config /: no config.json; not a Hugging Face model dir")


def test_the_root_as_model_path_is_named_by_its_key():
    config = REPO / "examples" / "sft_tiny_cpu.yaml"
    said = _json_error("train", "sft", "--config", config, "model.path=/")
    assert said["error"].startswith("model.path: / is neither a Hugging Face model dir")


@pytest.mark.parametrize("size", ["5iB", "5i", "5IB", "5 iB"])
def test_an_i_without_its_prefix_is_no_size(run, tmp_path, size):
    said = _json_error("ckpt", "export-hf", run, "--out", tmp_path / "x", "--max-shard-size", size)
    assert said["error"] == f"--max-shard-size {size!r}: expected e.g. 5GB, 500MB or a byte count"
    assert not (tmp_path / "x").exists()


def test_a_pipe_given_as_a_file_is_said_to_be_one():
    read, write = os.pipe()
    try:
        piped = f"/proc/self/fd/{read}"  # what /dev/stdin is under `cat x |`
        with pytest.raises(CheckpointFileError) as refused:
            safe_files.regular_file(piped)
        assert str(refused.value) == f"{piped}: a FIFO, not a regular file"
        done = CliRunner().invoke(app, ["config", "from-verl", piped])
        assert done.exit_code == 2
        assert done.stderr == f"error: {piped}: a FIFO, not a regular file\n"
    finally:
        os.close(read)
        os.close(write)


def test_a_config_that_is_no_regular_file_says_what_it_is():
    done = CliRunner().invoke(app, ["train", "sft", "--config", "/dev/null"])
    assert done.exit_code == 2
    assert done.stderr == "error: /dev/null: a character device, not a regular file\n"
