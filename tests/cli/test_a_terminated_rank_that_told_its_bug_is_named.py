"""A rank that failed with a bug is named even when torchrun's SIGTERM ended it.

The rank leaves its bug's line in torchrun's error file, then its traceback ends it; its
peer, waiting in a collective, loses contact and exits. On a loaded machine the peer can
exit first: torchrun then terminates the failing rank mid-traceback (SIGTERM), and the run
was reported as the peer's "rank 0: lost contact with the other ranks: ... GLHF!" instead of
"rank 1: ValueError: ...". Driven here with the error files the ranks write
(`cli.errors._tell_torchrun`) and torchrun's own ProcessFailure.
"""

from __future__ import annotations

import signal

from cli.errors import EXIT_PEER_LOST, _tell_torchrun
from cli.torchrun import _deciding_failure, _unsaid, rank_exit_code

BUG = "ValueError: rank 1's own failure"
LOST = "lost contact with the other ranks: Connection closed by peer"


def _failure(
    tmp_path, monkeypatch, rank: int, exitcode: int, message: str | None, lost_peers=False
):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    error_file = tmp_path / f"error_{rank}.json"
    if message is not None:
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
        _tell_torchrun(message, said=False, lost_peers=lost_peers)
    return ProcessFailure(
        local_rank=rank, pid=100 + rank, exitcode=exitcode, error_file=str(error_file)
    )


def test_the_terminated_rank_that_told_its_bug_decides(tmp_path, monkeypatch):
    failures = {
        0: _failure(tmp_path, monkeypatch, 0, EXIT_PEER_LOST, LOST, lost_peers=True),
        1: _failure(tmp_path, monkeypatch, 1, -signal.SIGTERM, BUG),
    }  # torchrun saw rank 0 end first, then terminated rank 1
    rank, failure = _deciding_failure(failures)
    assert rank == 1
    assert _unsaid(failure, failures) == BUG  # its traceback was cut: the launcher says it
    assert rank_exit_code(failure.exitcode) == 1


def test_a_terminated_rank_that_told_nothing_still_yields_to_the_peer(tmp_path, monkeypatch):
    failures = {
        0: _failure(tmp_path, monkeypatch, 0, EXIT_PEER_LOST, LOST, lost_peers=True),
        1: _failure(tmp_path, monkeypatch, 1, -signal.SIGTERM, None),
    }
    rank, failure = _deciding_failure(failures)
    assert rank == 0 and _unsaid(failure, failures) == LOST


def test_a_terminated_peer_that_told_its_lost_contact_does_not_decide(tmp_path, monkeypatch):
    """The peer wrote its lost contact and was terminated before it exited; the failing rank
    exited with its own code."""
    failures = {
        0: _failure(tmp_path, monkeypatch, 0, -signal.SIGTERM, LOST, lost_peers=True),
        1: _failure(tmp_path, monkeypatch, 1, 1, BUG),
    }
    rank, _failure_of_1 = _deciding_failure(failures)
    assert rank == 1
