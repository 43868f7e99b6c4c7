"""A training config whose data file is the demo's, missing, names `mfsdp demo`.

The example configs read the demo's data (`runs/demo/data/sft/train.parquet`); given before
the demo ran, the line said to make it with `mfsdp data synthetic --out DIR`, which writes
no file there, so the user still had to set data.train_files. Started through `./dev`, where
`mfsdp` is not on PATH, the command is named as `./dev demo`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mfsdp_ckpt.command_as_run import DEV_SCRIPT
from tests.support.paths import REPO

EXAMPLE = str(REPO / "examples" / "sft_tiny_cpu.yaml")


def train_sft(cwd, *overrides: str, dev: str | None = None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != DEV_SCRIPT}
    if dev is not None:
        env[DEV_SCRIPT] = dev
    code = f"import sys; sys.path.insert(0, {str(REPO)!r})\nfrom cli.main import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "train", "sft", "--config", EXAMPLE, *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("dev", "named"),
    [(None, "`mfsdp demo`"), ("../my clone/dev", "`'../my clone/dev' demo`")],
)
def test_the_demos_missing_data_names_the_demo(tmp_path, dev, named):
    done = train_sft(tmp_path, dev=dev)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert line.startswith("error: data.train_files: runs/demo/data/sft/train.parquet: no"), line
    assert f"; {named} writes it (the examples read the demo's data), or make it with" in line
    assert "\n" not in line


@pytest.mark.parametrize("path", ["other/train.parquet", "runs/demo2/data/train.parquet"])
def test_other_missing_data_is_not_sent_to_the_demo(tmp_path, path):
    done = train_sft(tmp_path, f"data.train_files=[{path}]")
    assert done.returncode == 2, done.stderr
    assert f"data.train_files: {path}: no such file" in done.stderr
    assert "mfsdp demo" not in done.stderr
    assert "make it with `mfsdp data gsm8k|math" in done.stderr
