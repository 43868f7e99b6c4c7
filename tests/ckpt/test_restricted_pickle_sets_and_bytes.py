"""The restricted unpickler reads sets, frozensets and bytes as a stock `pickle.loads` does,
at every protocol a checkpoint's blobs are written with (2-5), and the no-torch reader of
plain blobs (`plain_blob`) agrees with both. Was: protocol 4's EMPTY_SET, ADDITEMS and
FROZENSET were refused ("opcode EMPTY_SET is not admitted in checkpoint pickles"), so a set
torch's weights-only load cannot read at protocol 4/5 failed validate --deep."""

from __future__ import annotations

import codecs
import io
import pickle

import pytest
import torch

from mfsdp_ckpt.format.restricted_pickle import (
    PickleRefused,
    RestrictedUnpickler,
    pickle_globals,
    restricted_loads,
)
from mfsdp_ckpt.storage.plain_blob import plain_value

VALUES = [
    set(),
    {1, 2, 3},
    {"a", 2.5, None, b"c"},
    frozenset(),
    frozenset({"x", 7}),
    [{1}, frozenset({"y"}), {"k": {2}}],
    b"",
    b"\x00\x01abc",
    b"z" * 300,  # past SHORT_BINBYTES' 255
]
# Items protocols 4 and 5 store inline, which a call of `set` at 2 and 3 is not given (the
# reader passes an admitted constructor only flat arguments).
FRAMED_VALUES = [{(1, "b"), "a"}, frozenset({("x", 2)})]


def _value_id(value: object) -> str:
    """A test id for `value` the same in every process: a set's repr follows its items'
    string hashes, which differ per process (pytest-xdist's workers must collect alike)."""
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({', '.join(sorted(map(repr, value)))})"
    return repr(value)


# How protocols 2 and 3 spell a set, a frozenset and (at 2) bytes: calls of these globals.
BUILDERS = {
    **{(module, "set"): set for module in ("builtins", "__builtin__")},
    **{(module, "frozenset"): frozenset for module in ("builtins", "__builtin__")},
    ("_codecs", "encode"): codecs.encode,
    ("__builtin__", "bytes"): bytes,  # b"" at protocol 2
}


@pytest.mark.parametrize(
    "value, protocol",
    [(v, p) for v in VALUES for p in (2, 3, 4, 5)]
    + [(v, p) for v in FRAMED_VALUES for p in (4, 5)],
    ids=_value_id,
)
def test_the_restricted_reader_builds_what_pickle_loads_builds(value, protocol):
    data = pickle.dumps(value, protocol=protocol)
    table = BUILDERS if protocol < 4 else {}  # protocol 4 and 5 name no global for these
    read = restricted_loads(data, table)
    assert read == pickle.loads(data)
    assert type(read) is type(pickle.loads(data))


@pytest.mark.parametrize("protocol", [3, 4, 5])
@pytest.mark.parametrize("value", VALUES + FRAMED_VALUES, ids=_value_id)
def test_plain_blobs_of_protocol_3_to_5_are_read_without_torch_as_pickle_loads_reads_them(
    value, protocol
):
    blob = io.BytesIO()
    torch.save(value, blob, pickle_protocol=protocol)
    data = pickle.dumps(value, protocol=protocol)
    if protocol == 3 and isinstance(value, (set, frozenset, list)):
        assert plain_value(blob.getvalue(), ()) is None  # a call of builtins.set: torch's
        return
    assert plain_value(blob.getvalue(), ()) == (pickle.loads(data),)
    assert pickle_globals(data) == []  # the scan sees nothing to call in it either


@pytest.mark.parametrize(
    "data, refusal",
    [
        (b"\x80\x04](K\x01\x90.", "ADDITEMS to a list"),  # a list is not a set
        (b"\x80\x04(]\x91.", "set item of type list"),  # an unhashable item
        # ints 2**61 - 1 apart share one hash: N of them cost N**2 to insert
        (pickle.dumps({1, 2**61}, protocol=4), "could share its hash"),
        (pickle.dumps(frozenset({1, 2**61}), protocol=4), "could share its hash"),
    ],
    ids=["ADDITEMS to a list", "a list item", "colliding set", "colliding frozenset"],
)
def test_sets_take_only_plain_hashable_items_into_their_own_sets(data, refusal):
    with pytest.raises(PickleRefused, match=refusal):
        restricted_loads(data, {})


def test_a_flood_of_empty_sets_is_charged_what_each_set_retains():
    """An empty set retains ~235 bytes (scripts/pickle_budget.py): a flood of 1-byte
    EMPTY_SET opcodes is refused at the budget, as a flood of EMPTY_DICT is."""
    count = 1000
    flood = b"\x80\x04" + b"\x8f" * count + b"."
    with pytest.raises(PickleRefused, match="would retain more than"):
        restricted_loads(flood, {}, budget=200 * count)
    unpickler = RestrictedUnpickler(flood, {}, ())
    unpickler.load()
    assert unpickler.charged >= 235 * count


def test_a_set_is_charged_per_item_it_holds():
    items = pickle.dumps(set(range(1000)), protocol=4)
    unpickler = RestrictedUnpickler(items, {}, ())
    assert unpickler.load() == set(range(1000))
    as_list = RestrictedUnpickler(pickle.dumps(list(range(1000)), protocol=4), {}, ())
    as_list.load()
    assert unpickler.charged - as_list.charged >= 100 * 1000
