"""A resume checks the trainer state its checkpoint holds before trusting it: a `global_step_2`
whose state said step -5 resumed "steps -5 -> 3", wrote `config.until_step_-5.yaml`, emptied
metrics.jsonl and ended in a ZeroDivisionError traceback; one whose state said step 1 trained
step 2 again and saved over it. Now either is one line naming the step dir, and nothing in
the run dir has changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mfsdp_ckpt.check.validate import CheckpointInvalidError
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format.layout import CheckpointPaths
from mfsdp_ckpt.format.manifest import Manifest
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.resume import new_progress
from trainer.resume_state import check_trainer_state
from trainer.sft import run_sft

SETTINGS = ("data.global_batch_size=8", "checkpoint.save_every=1", "trainer.device=cpu")


def _progress(step):
    return {**new_progress(8, 16, 0, 123, True, 456), "step": step}


def _paths(tmp_path: Path, name: str = "global_step_2") -> CheckpointPaths:
    return CheckpointPaths(dist_ckpt=tmp_path / name / "dist_ckpt", step_dir=tmp_path / name)


def _manifest(step: int) -> Manifest:
    return Manifest(step=step, world_size=1, strategy="fsdp2", contents=["model"], files={})


@pytest.mark.parametrize(
    ("step", "manifest_step", "why"),
    [
        (-5, 2, "its trainer state holds step=-5, but a step is 0 or more"),
        (1, 2, "its trainer state says step 1, but its directory says step 2"),
        (3, None, "its trainer state says step 3, but its directory says step 2"),
        (2, 4, "its trainer state says step 2, but its manifest says step 4"),
        ("2", 2, "its trainer state holds step='2', not an integer"),
        (True, 2, "its trainer state holds step=True, not an integer"),
    ],
)
def test_a_step_that_is_not_the_checkpoints_own_is_refused(tmp_path, step, manifest_step, why):
    manifest = _manifest(manifest_step) if manifest_step is not None else None
    with pytest.raises(CheckpointInvalidError) as caught:
        check_trainer_state(_progress(step), _paths(tmp_path), manifest)
    assert str(caught.value).startswith(f"{tmp_path / 'global_step_2'}: {why}; refusing to resume")


def test_every_number_of_the_state_is_checked(tmp_path):
    progress = {**_progress(2), "train_rows": [16]}
    with pytest.raises(CheckpointInvalidError, match=r"holds train_rows=\[16\], not an integer"):
        check_trainer_state(progress, _paths(tmp_path), _manifest(2))


def test_the_checkpoints_own_step_is_taken(tmp_path):
    check_trainer_state(_progress(2), _paths(tmp_path), _manifest(2))
    bare = CheckpointPaths(dist_ckpt=tmp_path / "bare")  # no step dir, no manifest: any step
    check_trainer_state(_progress(7), bare, None)


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, Path]:
    """Runs whose step 2 was saved with another step in its trainer state (its name and
    manifest say 2), each with the metrics and config of the run that saved it."""
    root = tmp_path_factory.mktemp("state")
    data = write_chat_jsonl(root / "train.jsonl", rows=16)
    save = Checkpointer.save
    runs = {}
    for stored in (-5, 1):

        def saving(self, step, states, *args, stored=stored, **kwargs):
            if step == 2:
                states["extra"]["step"] = stored
            return save(self, step, states, *args, **kwargs)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Checkpointer, "save", saving)
            run_sft(tiny_config(data, root / str(stored), *SETTINGS, "trainer.total_steps=2"))
        runs[str(stored)] = root / str(stored)
    runs["data"] = data
    return runs


def _contents(run: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(run)): path.read_bytes()
        for path in sorted(run.rglob("*"))
        if path.is_file()
    }


@pytest.mark.parametrize("stored", [-5, 1])
def test_a_resume_is_refused_before_the_run_dir_changes(planted, stored):
    run = planted[str(stored)]
    before = _contents(run)
    assert before["metrics.jsonl"].count(b"\n") == 2
    with pytest.raises(CheckpointInvalidError) as caught:
        run_sft(tiny_config(planted["data"], run, *SETTINGS, "trainer.total_steps=3"))
    message = str(caught.value)  # validation before the load may say it first
    assert message.startswith(str(run / "global_step_2")), message
    assert f"says step {stored}, " in message and "\n" not in message, message
    assert _contents(run) == before
    assert not [name for name in os.listdir(run) if name.startswith("config.until_step")]
