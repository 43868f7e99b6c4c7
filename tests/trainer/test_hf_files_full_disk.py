"""A full disk while a model dir's files are written (the demo's tiny model, a step's
huggingface/) is one error naming the file. Was: safetensors' SafetensorError and
tokenizers' plain `Exception` ("No space left on device (os error 28)"), neither an OSError:
`mfsdp demo` printed a 30-line traceback, a train save `saving step 3 failed: Exception: ...`
naming no file. The disk fills deterministically: RLIMIT_FSIZE in a child process (writes
past it fail with EFBIG)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import REPO, repo_env

LIMITED = """
import resource, sys
from pathlib import Path
from trainer.tiny import build_tiny_model_dir
out, limit = Path(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    build_tiny_model_dir(out, with_weights=True)
except OSError as err:
    print(err.filename, err.strerror, sep="|")
"""


@pytest.mark.parametrize(
    "limit, file",
    [
        (64 << 10, "model.safetensors"),  # safetensors' Rust writer
        (8 << 10, "tokenizer.json"),  # tokenizers' Rust writer
        (400, "config.json"),  # transformers' Python writer: an OSError naming no file
    ],
)
def test_a_model_dir_the_disk_cannot_hold_names_the_file(tmp_path, limit, file):
    out = tmp_path / "model"
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, str(out), str(limit)],
        capture_output=True,
        text=True,
        timeout=120,
        env=repo_env(),
    )
    assert done.stdout.strip() == f"{out / file}|not written (File too large)", done.stderr


def _limit_file_size() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))


def test_the_demo_on_a_full_disk_ends_in_one_line(tmp_path):
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "demo", "--out", str(out), "--nproc", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**repo_env(), "OMP_NUM_THREADS": "1"},
        preexec_fn=_limit_file_size,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {out}/init_model/model.safetensors: not written (File too large)"], (
        done.stderr
    )
