"""Which of Accelerate's automatic-naming saves (`PROJECT/checkpoints/checkpoint_<i>/`) is
the one `load_state()` resumes: the largest i by number, from the `checkpoints/` folder or
the project dir holding it, with a note naming the others. Both were "not a checkpoint",
with a "looked for" line naming the Trainer's `checkpoint-N/` only."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfsdp_ckpt.format.hf_trainer import newest_accelerate_save


def _project(root: Path, saves: tuple[int, ...]) -> Path:
    project = root / "proj"
    for i in saves:
        (project / "checkpoints" / f"checkpoint_{i}" / "pytorch_model_fsdp_0").mkdir(parents=True)
    (project / "logs").mkdir()
    return project


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("level", ["project", "folder"])
def test_the_largest_save_number_is_the_one_resumed(level, tmp_path):
    project = _project(tmp_path, (2, 10, 9))  # by number: "checkpoint_9" > "checkpoint_10" as text
    folder = project / "checkpoints"
    given = project if level == "project" else folder
    found = newest_accelerate_save(given, _names(given))
    assert found == (
        folder / "checkpoint_10",
        f"checkpoint_10 is the newest of Accelerate's automatic-naming saves in {folder}, the"
        " one load_state() resumes; other saves here: checkpoint_9, checkpoint_2",
    )


def test_one_save_has_no_others_named(tmp_path):
    folder = _project(tmp_path, (0,)) / "checkpoints"
    found = newest_accelerate_save(folder, _names(folder))
    assert found is not None and "other saves" not in found[1]


def test_other_dirs_are_no_accelerate_saves(tmp_path):
    run = tmp_path / "out"
    (run / "checkpoint-4").mkdir(parents=True)  # the Trainer's name, read as its own
    (run / "checkpoints").mkdir()  # a folder of that name holding no save
    (run / "checkpoint_3").write_text("a file, not a save\n")
    assert newest_accelerate_save(run, _names(run)) is None
