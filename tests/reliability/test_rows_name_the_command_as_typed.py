"""A command run in-process for the reliability rows (`outcome.invoke`) names itself as a
user types it: `see 'mfsdp train sft --help'`. Was: click's runner named the group after
its function, and docs/reliability.md's nproc_zero row said `see 'app train sft --help'`."""

from __future__ import annotations

from tests.reliability.bad_inputs import BAD_INPUTS
from tests.reliability.outcome import invoke


def test_a_usage_error_names_the_mfsdp_command(tmp_path):
    (nproc_zero,) = [bad for bad in BAD_INPUTS if bad.name == "nproc_zero"]
    outcome = invoke(nproc_zero.args(tmp_path))  # refused before any file is read
    assert outcome.exit_code == 2, outcome.output
    assert outcome.message.endswith("; see 'mfsdp train sft --help'"), outcome.message
