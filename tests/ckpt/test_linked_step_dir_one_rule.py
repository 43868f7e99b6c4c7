"""A step dir moved to another disk and linked back is the user's (docs/sft.md): every
reader follows it alike, its reads confined to where it leads. `train` resumed it and
validate/inspect/export-hf of `RUN/global_step_2` read it, while the same three of `RUN`
refused "resolves outside". A `manifest.json` linked out of its step is named so by the
run's readers too, where inspect and export-hf of `RUN` called the step "missing or
incomplete"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.format import layout
from tests.support.interop_layouts import run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft

SETTINGS = ("data.global_batch_size=8", "checkpoint.save_every=1", "trainer.device=cpu")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A run at step 2, saved at every step; copied by each test before it is changed."""
    root = tmp_path_factory.mktemp("linked")
    data = write_chat_jsonl(root / "train.jsonl", rows=16)
    run_sft(tiny_config(data, root / "run", *SETTINGS, "trainer.total_steps=2"))
    return root


def _copy(trained: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(a copy of the run, the data file)."""
    shutil.copytree(trained / "run", tmp_path / "run", symlinks=True)
    return tmp_path / "run", trained / "train.jsonl"


def _moved_out(run: Path, tmp_path: Path) -> Path:
    """Move step 2 to `tmp_path/disk` and link it back; the step's new place."""
    moved = tmp_path / "disk" / "global_step_2"
    moved.parent.mkdir()
    layout.step_dir(run, 2).rename(moved)
    layout.step_dir(run, 2).symlink_to(moved)
    return moved


def _errors(path: Path) -> list[str]:
    return [f.message for f in validate_checkpoint(path).findings if f.severity == "error"]


def test_every_reader_of_the_run_reads_a_linked_step(trained, tmp_path):
    run, data = _copy(trained, tmp_path)
    _moved_out(run, tmp_path)
    step = layout.step_dir(run, 2)
    for given in (run, step):
        assert _errors(given) == []
        code, out, err = run_cli("ckpt", "inspect", given)
        assert code == 0 and "global_step_2" in out, err
        code, _, err = run_cli("ckpt", "export-hf", given, "--out", tmp_path / f"hf_{given.name}")
        assert code == 0, err
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=3"))
    assert step.is_symlink() and (layout.step_dir(run, 3) / layout.MANIFEST_FILE).is_file()


def test_a_linked_steps_reads_stay_where_it_leads(trained, tmp_path):
    """Its dist_ckpt linked on out of the step's own place is refused by every reader."""
    run, _ = _copy(trained, tmp_path)
    moved = _moved_out(run, tmp_path)
    farther = tmp_path / "farther"
    (moved / layout.DIST_CKPT_DIR).rename(farther)
    (moved / layout.DIST_CKPT_DIR).symlink_to(farther)
    for given in (run, layout.step_dir(run, 2)):
        code, _, err = run_cli("ckpt", "inspect", given)
        assert code == 1 and "resolves outside" in err, err


def test_a_manifest_linked_out_is_named_by_every_reader(trained, tmp_path):
    run, _ = _copy(trained, tmp_path)
    manifest = layout.step_dir(run, 2) / layout.MANIFEST_FILE
    outside = tmp_path / "manifest.json"
    manifest.rename(outside)
    manifest.symlink_to(outside)
    line = f"error: {manifest}: resolves outside the checkpoint"
    for command in (
        ("validate", run),
        ("inspect", run),
        ("export-hf", run, "--out", tmp_path / "hf"),
    ):
        code, out, err = run_cli("ckpt", *command)  # validate reports on stdout
        assert code == 1 and line in (out + err).splitlines(), (command, out, err)
        assert "missing or incomplete" not in out + err
