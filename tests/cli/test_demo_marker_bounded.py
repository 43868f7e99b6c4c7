"""The demo's marker (`cli/demo_record.py`) is parsed by the bounded JSON reader: one nested
too deep, holding more objects than a demo's list, or giving a key twice is a marker with
no list to trust, so the directory is kept, as for any other damaged marker.

Was: Python's json, so a marker of 100,000 `[` raised RecursionError (a traceback from
`mfsdp demo`), and 4 MB of `{}` were parsed whole before the list was found wrong."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from cli.demo_record import MARKER, MAX_MARKER_BYTES, refusal
from mfsdp_ckpt.errors import MfsdpUsageError

_LIST = {"written_by": "mfsdp demo", "dirs": [], "files": {}}
MARKERS = {
    "nested": "[" * 100_000 + "]" * 100_000,
    "many objects": "[" + "{}," * (MAX_MARKER_BYTES // 3 - 1) + "{}]",
    "key twice": json.dumps(_LIST)[:-1] + ', "files": {}}',
}


@pytest.mark.parametrize("case", list(MARKERS))
def test_a_marker_past_the_bounds_keeps_the_directory(case, tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    (out / MARKER).write_text(MARKERS[case])
    (out / "kept.txt").write_text("a user's file")
    tracemalloc.start()
    try:
        refused = refusal(out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(refused, MfsdpUsageError), refused
    assert "without the list of what it wrote" in str(refused), refused
    assert peak < 4 * MAX_MARKER_BYTES, peak  # the text, never a parsed tree of it
    assert (out / "kept.txt").exists()


def test_a_marker_of_what_the_demo_wrote_still_reads(tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    (out / MARKER).write_text(json.dumps(_LIST))
    assert refusal(out) is None
