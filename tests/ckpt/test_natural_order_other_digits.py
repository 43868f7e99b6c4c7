"""Names ordered by their numbers: one sort key for step dirs and exported weight names.

The key took every part `str.isdigit` accepts for a number, and `int` then raised on a
superscript two, or an Arabic-Indic digit became a number where another name held text: a
run dir holding a file so named stopped a resumed run before it trained ("invalid literal
for int()")."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.format import run_steps
from mfsdp_ckpt.format.run_steps import natural_order


def test_steps_and_layers_sort_by_their_numbers():
    names = ["global_step_10", "global_step_9", "model.layers.10.w", "model.layers.2.w"]
    assert sorted(names, key=natural_order) == [
        "global_step_9",
        "global_step_10",
        "model.layers.2.w",
        "model.layers.10.w",
    ]


@pytest.mark.parametrize(
    ("names", "ordered"),
    [
        (["a1", "\u00b2"], ["a1", "\u00b2"]),
        (["\u0661", "a1"], ["a1", "\u0661"]),
        (["x\u00b2", "x10", "x2"], ["x2", "x10", "x\u00b2"]),
        (["\u0661\u0662", "b", "10", "9"], ["9", "10", "b", "\u0661\u0662"]),
    ],
    ids=["superscript", "arabic_indic", "superscript_suffix", "mixed"],
)
def test_other_digits_are_text(names, ordered):
    assert sorted(names, key=natural_order) == ordered


def test_a_resumed_run_beside_such_a_file_is_checked(tmp_path):
    (tmp_path / "global_step_1").mkdir()
    for name in ("\u00b2", "\u0661", "notes1"):
        (tmp_path / name).write_text("")
    run_steps.refuse_replacing_steps(tmp_path, 1)  # resuming step 1: nothing to refuse
