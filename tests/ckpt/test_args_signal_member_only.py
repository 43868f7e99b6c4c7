"""`signal.Signals` called with one int (how pickle writes `signal.SIGTERM`, Megatron-LM's
`exit_signal`) is an enum member's lookup: the args reader reads it as one and validate's
pickle scan finds nothing in it. Every other use of the `signal` module stays refused by
both: its functions, the class called with anything but one int, a write into the member.
"""

from __future__ import annotations

import argparse
import pickle
import signal

import pytest

from mfsdp_ckpt.check.object_pickles import code_on_load
from mfsdp_ckpt.check.report import ERROR
from mfsdp_ckpt.format.restricted_pickle import (
    PickleRefused,
    PlaceholderCall,
    pickle_globals,
    restricted_loads,
)
from mfsdp_ckpt.format.saved_objects import (
    NAMESPACE_BUDGET,
    NAMESPACE_TABLE,
    NamespaceRecord,
    args_placeholder,
)

# Hand-written protocol-2 pickles of what a Namespace never holds
BY_NAME = b"\x80\x02csignal\nSignals\nX\x07\x00\x00\x00SIGTERM\x85R."  # Signals("SIGTERM")
TWO_INTS = b"\x80\x02csignal\nSignals\nK\x0fK\x01\x86R."  # Signals(15, 1)
KILL = b"\x80\x02csignal\npthread_kill\nK\x01K\x0f\x86R."  # signal.pthread_kill(1, 15)
HANDLER = b"\x80\x02csignal\nsignal\n."  # the function signal.signal, held as a value
# Signals(15), then a BUILD writing {"a": 1} into the member every module shares
WRITE_INTO_MEMBER = b"\x80\x02csignal\nSignals\nK\x0f\x85R}(X\x01\x00\x00\x00aK\x01ub."


def _read_args(data: bytes):
    return restricted_loads(
        data,
        NAMESPACE_TABLE,
        (NamespaceRecord,),
        budget=NAMESPACE_BUDGET,
        placeholders=args_placeholder,
    )


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_sigterm_in_a_namespace_is_read_and_scanned_as_a_member(protocol):
    data = pickle.dumps(argparse.Namespace(exit_signal=signal.SIGTERM, bf16=True), protocol)
    fields = _read_args(data).fields
    member = fields["exit_signal"]
    assert isinstance(member, PlaceholderCall) and member.args == (15,), member
    assert member.target.qualname == "signal.Signals" and fields["bf16"] is True
    assert code_on_load(pickle_globals(data), args=True) is None
    assert code_on_load(pickle_globals(data)) is None  # in any other entry too


@pytest.mark.parametrize(
    ("data", "refusal", "named"),
    [
        (BY_NAME, "only its member lookup by one int", "signal.Signals"),
        (TWO_INTS, "only its member lookup by one int", "signal.Signals"),
        (KILL, "refusing global signal.pthread_kill", "signal.pthread_kill"),
        (HANDLER, "refusing global signal.signal", "signal.signal"),
        (WRITE_INTO_MEMBER, "BUILD on a PlaceholderCall", "a write into signal.Signals"),
    ],
)
def test_every_other_use_of_signal_is_refused_by_both(data, refusal, named):
    with pytest.raises(PickleRefused, match=refusal):
        _read_args(data)
    for args in (True, False):
        found = code_on_load(pickle_globals(data), args=args)
        assert found is not None and found.severity == ERROR, found
        assert named in found.calls, found
