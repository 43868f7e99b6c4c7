"""The refusal of a torchtitan checkpoint folder names its complete steps, newest first, how
to convert another than the newest (its path, as pasted), and the step-N dirs a save left
without .metadata: it named the newest step alone, so a user after an earlier step or
wondering about a step-N it skipped was not told."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.format.dir_entries import children
from mfsdp_ckpt.format.foreign_formats import ForeignFormatError, refuse_torchtitan_folder
from tests.ckpt.test_interop_torchtitan import _dump
from tests.support.interop_layouts import one_error_line, run_cli


def test_a_torchtitan_folder_lists_its_complete_steps(tmp_path):
    folder = _dump(tmp_path, steps=(10, 20)) / "checkpoint"
    (folder / "step-30").mkdir()  # a save in flight, or one killed
    for given in (folder, folder.parent):
        code, out, err = run_cli("ckpt", "inspect", given)
        line = one_error_line(err)
        assert code == 2 and f"{given}: a torchtitan checkpoint" in line, out + err
        assert line.endswith(
            f"; its complete steps: step-20, step-10; to convert another, give its path in place"
            f" of {folder / 'step-20'} (e.g. {folder / 'step-10'}); step-30: no .metadata (a"
            " save that did not finish)"
        ), line


def test_a_folder_of_one_step_names_it_alone(tmp_path):
    folder = _dump(tmp_path, steps=(10,)) / "checkpoint"
    code, _out, err = run_cli("ckpt", "validate", folder)
    line = one_error_line(err)
    assert code == 2 and "complete steps" not in line and "no .metadata" not in line, line


class _CountedName(str):
    """A dir name counting the times it is compared for equality with another: what the
    listing's cost grows with (comparing each step with a list of the complete ones made
    100,000 steps take minutes)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountedName.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_the_listing_grows_with_the_steps_not_their_square(tmp_path):
    folder = _dump(tmp_path, steps=(10**6,)) / "checkpoint"
    for step in range(2000):
        (folder / f"step-{step}").mkdir()
        (folder / f"step-{step}" / ".metadata").write_bytes(b"")
    names = [_CountedName(name) for name in children(folder)]
    _CountedName.compared = 0
    with pytest.raises(ForeignFormatError, match="; its complete steps: step-1000000, "):
        refuse_torchtitan_folder(folder, names)
    assert _CountedName.compared < 10 * len(names), _CountedName.compared
