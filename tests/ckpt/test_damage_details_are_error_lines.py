"""A damaged pickle's or blob's own error, quoted in its line, is an `error_line`: type and
gist, escaped, its cut marked with the start and the end kept.

Five places built "(Type: message[:120])" by hand: a long message was cut off unmarked,
losing its end (zipfile's "File name in directory ... and header ... differ." kept the
first name only), beside `error_line`, which the same "unreadable blob" line elsewhere used."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.restricted_pickle import PickleRefused, check_pickle_budget, pickle_globals
from mfsdp_ckpt.format.saved_objects import load_plain
from tests.support.torch_archives import torch_archive


def _quoted_cut(message: str, kind: str, ends: str) -> None:
    """`message` quotes an error of type `kind` cut in its middle, its end `ends` kept."""
    assert f"({kind}: " in message, message
    assert "…(+" in message and message.endswith(f"{ends})"), message
    assert len(message) < 200, message


_INT_LINE = b"I" + b"9" * 100 + b"x" * 40 + b"\n."  # an INT opcode whose text is no number


def test_the_budget_walk_quotes_a_damaged_pickle_as_an_error_line():
    with pytest.raises(PickleRefused) as refused:
        check_pickle_budget(_INT_LINE, 1 << 20, "blob pickle")
    _quoted_cut(str(refused.value), "ValueError", "x'")


def test_listing_a_damaged_pickles_globals_quotes_it_as_an_error_line():
    with pytest.raises(PickleRefused) as refused:
        pickle_globals(_INT_LINE)
    _quoted_cut(str(refused.value), "ValueError", "x'")


def test_a_pickle_the_walk_passes_and_the_unpickler_refuses_is_quoted_as_one():
    # "0...01" is a number to the walk (base 10) and not to pickle's LONG (base 0)
    pickled = b"\x80\x02L" + b"0" * 140 + b"1L\n."
    with pytest.raises(CheckpointFormatError) as raised:
        load_plain(torch_archive(pickled), "train_state.pt")
    _quoted_cut(str(raised.value), "ValueError", "01'")


def test_a_blob_whose_member_header_differs_names_both_names():
    raw = bytearray(torch_archive(b"\x80\x02N.", "x" * 200))
    first = raw.index(b"x" * 200, raw.index(b"PK\x03\x04"))  # the first member's local header
    raw[first] = ord("y")
    with pytest.raises(CheckpointFormatError) as raised:
        load_plain(bytes(raw), "train_state.pt")
    _quoted_cut(str(raised.value), "BadZipFile", "differ.")
