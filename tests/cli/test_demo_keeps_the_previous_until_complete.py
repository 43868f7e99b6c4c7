"""A demo keeps the previous demo in its --out until it completes, and stops in one line when
its stdout closes: `mfsdp demo --out d2 | head -2` ended with exit 1 and no word, with d2
half built and the complete demo d2 had held already deleted."""

from __future__ import annotations

from pathlib import Path

from cli import demo_record
from cli.demo import _claim
from tests.support.fresh_python import demo_with_stdout_closed


def _previous_demo(out: Path) -> None:
    """A directory as a demo leaves it: its marker, what it wrote, the list of that."""
    out.mkdir()
    demo_record.start(out)
    (out / "hf").mkdir()
    (out / "hf" / "config.json").write_text("{}")
    demo_record.record(out)


def test_the_previous_demo_is_moved_beside_not_deleted(tmp_path):
    out = tmp_path / "d2"
    _previous_demo(out)
    kept = _claim(out)
    assert kept == tmp_path / ".d2.demo-previous"
    assert (kept / "hf" / "config.json").read_text() == "{}"
    assert sorted(p.name for p in out.iterdir()) == [demo_record.MARKER]
    # a demo stopped part way in `out`: the next one deletes that, and keeps the complete one
    (out / "data").mkdir()
    demo_record.record(out)
    assert _claim(out) == kept and (kept / "hf" / "config.json").is_file()
    assert sorted(p.name for p in out.iterdir()) == [demo_record.MARKER]


def test_a_closed_stdout_stops_the_demo_in_one_line_keeping_the_previous(tmp_path):
    out = tmp_path / "d2"
    _previous_demo(out)
    code, err = demo_with_stdout_closed(out)  # as `| head -0` does
    assert code == 141
    kept = tmp_path / ".d2.demo-previous"
    assert err == (
        "error: stdout closed; the demo stopped at writing the data and model;"
        f" {out} is incomplete (the previous demo is kept in {kept}); `mfsdp demo --out {out}`"
        " again starts over\n"
    )
    assert (kept / "hf" / "config.json").is_file()
