"""Every fault of the matrix (tests/reliability/faults.py) against every consumer.

For each damaged or booby-trapped copy of a small SFT run: `mfsdp ckpt validate --deep`
names the fault; `mfsdp ckpt export-hf` and a resumed `mfsdp train sft` refuse with one
`error:` line (no traceback) and leave nothing behind; nothing in the checkpoint runs code.
The pristine copy passes all three, so a consumer that refuses everything cannot pass.
"""

from __future__ import annotations

import pytest

from tests.reliability.faults import CONSUMERS, FAULTS, apply_and_consume
from tests.reliability.sft_run import fresh_copy, make_pristine


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return make_pristine(tmp_path_factory.mktemp("reliability"))


@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_pristine_run_is_accepted(pristine, tmp_path, consumer):
    run = fresh_copy(pristine, tmp_path)
    outcome = CONSUMERS[consumer](run)
    assert outcome.exit_code == 0 and not outcome.traceback, outcome.output[-2000:]


@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_fault(pristine, tmp_path, fault, consumer):
    observed = apply_and_consume(fault, pristine, tmp_path, consumer)
    assert not observed.problems, f"{observed.problems}\n{observed.outcome.output[-2000:]}"


def test_every_issue_fault_is_in_the_matrix():
    """The faults the reliability issue names, so the table cannot quietly shrink."""
    required = {
        "truncated_shard",
        "flipped_byte",
        "deleted_shard",
        "unknown_file",
        "manifest_size_edited",
        "metadata_truncated",
        "tracker_missing_step",
        "optimizer_absent",
        "metadata_runs_code",
        "blob_runs_code",
        "manifest_path_traversal",
        "metadata_path_traversal",
        "symlink_out",
        "absurd_shape",
        "absurd_offset",
    }
    assert required <= {f.name for f in FAULTS}
    assert all(set(f.expect) == set(CONSUMERS) for f in FAULTS)
