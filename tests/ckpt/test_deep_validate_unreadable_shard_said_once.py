"""`validate --deep` of a checkpoint with one data file this user may not read says so once
for the file and once for the tensors in it (they were one error line each, all repeating
the file's "Permission denied"), as it already did for a missing file."""

from __future__ import annotations

import shutil

from tests.support.paths import FIXTURES
from tests.support.permissions import run_cli_denied

MFSDP_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # mfsdp's layout, with a manifest
STEP = "global_step_2"


def test_an_unreadable_shard_is_one_line_and_its_tensors_one_more(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(MFSDP_RUN, run)
    dist_ckpt = run / STEP / "dist_ckpt"
    shard = sorted(dist_ckpt.glob("*.distcp"))[0]
    [record] = run_cli_denied([["ckpt", "validate", "--deep", str(run / STEP)]], unreadable=shard)
    assert record["escaped"] is None, record
    assert record["exit"] == 1, record
    said = record["stdout"] + record["stderr"]  # one stream or two, as click's runner has them
    errors = [line for line in said.splitlines() if line.startswith("error:")]
    naming = [line for line in errors if shard.name in line]
    assert any("Permission denied" in line for line in naming), errors
    assert any(f"not read: their data file {shard.name} is unreadable" in line for line in naming)
    assert len(errors) <= 3, errors  # the file, its tensors together, the summary at most


def test_a_shard_cut_to_zero_bytes_is_one_line_and_its_tensors_one_more(tmp_path):
    """Each tensor in it said `needs bytes [...] but the file has 0 (truncated?)` alone."""
    from tests.support.interop_layouts import run_cli

    run = tmp_path / "run"
    shutil.copytree(MFSDP_RUN, run)
    shard = sorted((run / STEP / "dist_ckpt").glob("*.distcp"))[0]
    shard.write_bytes(b"")
    code, stdout, err = run_cli("ckpt", "validate", "--deep", run / STEP)
    assert code == 1, stdout + err
    errors = [line for line in (stdout + err).splitlines() if line.startswith("error:")]
    assert any(f"not read: their data file {shard.name} is empty (0 bytes)" in e for e in errors)
    assert len(errors) <= 4, errors  # the file, its tensors together, the head pair, summary
