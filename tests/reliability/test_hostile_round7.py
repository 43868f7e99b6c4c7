"""Hostile and damaged inputs the earlier rounds left open, each refused in one line with
the right exit code:

* a checkpoint dir (run, step or dist_ckpt) this user may not read: a permission error
  naming it (exit 1), not "not a checkpoint" or click's "not readable" (exit 2);
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.support.paths import FIXTURES, REPO, repo_env
from tests.support.permissions import without_root_overrides

MFSDP_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # mfsdp's layout, with a manifest
STEP = "global_step_2"


def _one_error(stderr: str, *needles: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------- permissions
# Runs CLI argument lists in one process (under `without_root_overrides`), one JSON record
# per list: a process per case would spend the test's time importing torch.
_RUN_CASES = r"""
import json, sys
from click.testing import CliRunner
from cli.main import app
records = []
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, args)
    escaped = None if isinstance(result.exception, (SystemExit, type(None))) else result.exception
    records.append({"exit": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
                    "escaped": repr(escaped) if escaped else None})
print(json.dumps(records))
"""


def _run_denied(cases: list[list[str]]) -> list[dict]:
    done = subprocess.run(
        [*without_root_overrides(), sys.executable, "-c", _RUN_CASES, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**repo_env(), "OMP_NUM_THREADS": "1"},
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("denied", ["run", STEP, f"{STEP}/dist_ckpt"])
def test_a_checkpoint_dir_this_user_cannot_read_is_a_failed_read_naming_it(tmp_path, denied):
    run = tmp_path / "run"
    shutil.copytree(MFSDP_RUN, run)
    target = run / denied if denied != "run" else run
    given = [run, run / STEP, run / STEP / "dist_ckpt"]
    cases = [
        [*command, str(path)]
        for path in given
        for command in (
            ["ckpt", "validate"],
            ["ckpt", "validate", "--json"],
            ["ckpt", "inspect"],
            ["ckpt", "export-hf", "--out", str(tmp_path / "out")],
        )
    ]
    target.chmod(0)
    try:
        records = _run_denied(cases)
    finally:
        target.chmod(0o755)
    for args, record in zip(cases, records, strict=True):
        assert record["escaped"] is None, (args, record)
        assert record["exit"] == 1, (args, record)
        _one_error(record["stderr"], str(target), "Permission denied")
        if "--json" in args:
            assert json.loads(record["stdout"])["exit_code"] == 1, (args, record)
    assert not (tmp_path / "out").exists()


def test_a_huggingface_dir_this_user_cannot_read_fails_the_export(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(MFSDP_RUN, run)
    assets = run / STEP / "huggingface"
    assets.chmod(0)
    try:
        (record,) = _run_denied([["ckpt", "export-hf", str(run), "--out", str(tmp_path / "o")]])
    finally:
        assets.chmod(0o755)
    assert record["exit"] == 1, record
    _one_error(record["stderr"], str(assets), "Permission denied")
