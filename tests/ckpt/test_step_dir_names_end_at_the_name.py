"""A step dir's name is the whole name: `step-15` followed by a newline is no step.

The step-dir patterns ended in `$`, which also matches before a trailing newline, so a dir
named "step-15\\n" was listed among a torchtitan folder's complete steps as step 15 (and a
path pasted from that line named no dir). Every name pattern of the step layouts ends at
the name's end (`\\Z`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mfsdp_ckpt.format import hf_trainer, layout, left_step_names, torchtitan
from mfsdp_ckpt.format.foreign_formats import ForeignFormatError, refuse_torchtitan_folder
from tests.ckpt.test_interop_torchtitan import _dump

# (a step dir's name, whether a reader of its layout takes it for a step)
READERS = {
    "torchtitan step-N": ("step-15", lambda name: torchtitan.step_of(Path(name)) >= 0),
    "global_step_N": ("global_step_15", lambda name: layout.parse_step_dir_name(name) is not None),
    "iter_NNNNNNN": ("iter_0000015", layout.is_megatron_step_name),
    "HF Trainer checkpoint-N": (
        "checkpoint-15",
        lambda name: hf_trainer.checkpoint_number(name) is not None,
    ),
    "HF Trainer optimizer_K": (
        "optimizer_0",
        lambda name: hf_trainer.model_dir_of_optimizer(Path(name)) is not None,
    ),
    "an unfinished save": (
        "global_step_15.tmp",
        lambda name: left_step_names.left_step_line(name) is not None,
    ),
    "a stopped removal": (
        ".global_step_15.removing-42",
        lambda name: left_step_names.left_step_line(name) is not None,
    ),
}


@pytest.mark.parametrize("case", list(READERS))
def test_a_trailing_newline_makes_no_step_name(case):
    name, taken = READERS[case]
    assert taken(name), name
    assert not taken(name + "\n"), name


def test_a_torchtitan_folder_does_not_list_a_name_with_a_newline(tmp_path):
    folder = _dump(tmp_path, steps=(10, 20)) / "checkpoint"
    (folder / "step-15\n").mkdir()
    (folder / "step-15\n" / ".metadata").write_bytes(b"")
    with pytest.raises(ForeignFormatError) as refused:
        refuse_torchtitan_folder(folder, sorted(p.name for p in folder.iterdir()))
    assert "; its complete steps: step-20, step-10; " in str(refused.value), refused.value
    assert "step-15" not in str(refused.value), refused.value
