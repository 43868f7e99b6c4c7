"""The restricted unpickler reads a file a window at a time, and a pickle given as bytes in
place: both must build the same value, charge the same budget and stop at the same STOP,
whichever opcode's argument a window boundary cuts."""

from __future__ import annotations

import gc
import io
import pickle

import pytest

from mfsdp_ckpt.format import restricted_pickle
from mfsdp_ckpt.format.restricted_pickle import PickleRefused, RestrictedUnpickler


def _value() -> dict:
    """Plain data whose pickle crosses a window's end, with every inline opcode's
    argument (short strings of each length, ints of 1, 2 and 4 bytes, memo indices past
    255) and strings longer than a window's slack at every offset."""
    names = [f"layer.{i}.{'x' * (i % 256)}" for i in range(6000)]
    return {
        "names": names,
        "again": [names[i] for i in range(0, 6000, 7)],  # memo gets past index 255
        "ints": [i * 37 for i in range(40000)] + [-1, 2**31 - 1, 2**40],
        "long": ["y" * (300 + i) for i in range(0, 3000, 11)],
        "tuples": [(i,) for i in range(300)] + [(i, "a") for i in range(300)],
        "none": [None, True, False, 1.5],
    }


@pytest.mark.parametrize("protocol", [2, 4])
def test_a_file_read_in_windows_reads_as_bytes_do(protocol):
    data = pickle.dumps(_value(), protocol=protocol)
    assert len(data) > restricted_pickle.WINDOW
    whole = RestrictedUnpickler(data, {}, ())
    expected = whole.load()
    # a small buffer: the window's reads never line up with a file's own
    file = io.BufferedReader(io.BytesIO(data + b"after"), 4099)
    windowed = RestrictedUnpickler(file, {}, (), size=len(data) + 5)
    assert windowed.load() == expected == _value()
    assert (
        (windowed.consumed, windowed.charged)
        == (whole.consumed, whole.charged)
        == (
            len(data),
            whole.charged,
        )
    )


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 200])
def test_a_pickle_cut_short_fails_alike_from_a_file_and_from_bytes(cut):
    data = pickle.dumps(_value(), protocol=4)[:-cut]
    errors = []
    for source, size in ((data, None), (io.BufferedReader(io.BytesIO(data), 4099), len(data))):
        with pytest.raises(Exception) as err:
            RestrictedUnpickler(source, {}, (), size=size).load()
        errors.append((type(err.value), str(err.value)))
    assert errors[0] == errors[1], errors
    assert errors[0][0] is not PickleRefused  # damage, not policy


@pytest.mark.parametrize("enabled", [True, False])
def test_a_load_leaves_the_collector_as_it_found_it(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        RestrictedUnpickler(pickle.dumps({"a": [1, 2]}), {}, ()).load()
        assert gc.isenabled() is enabled
        with pytest.raises(PickleRefused):
            RestrictedUnpickler(pickle.dumps(print), {}, ()).load()
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
