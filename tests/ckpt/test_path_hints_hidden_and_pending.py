"""Path hints never offer a hidden name, and a path whose output lock a live process holds is
said to be on its way: `mfsdp ckpt validate runs/conc` while its run was starting (the lock
`.conc.out-lock` held, no run dir yet) answered "did you mean runs/.conc.out-lock?"."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.format import checkpoint_resolution, layout
from mfsdp_ckpt.format.closest_path import closest_existing
from mfsdp_ckpt.storage.out_lock import out_lock
from tests.support.cli_errors import one_error
from trainer.data.files import data_files_in


@pytest.mark.parametrize(
    "hidden, given",
    [
        (".conc.out-lock", "conc"),  # an output's lock, as out_lock leaves it
        (".conc.export-tmp-4242", "conc.export"),  # an export's work dir, named in part
        (".sft", "sft"),
        (".cache", "cach"),
    ],
)
def test_a_hidden_name_is_never_offered(tmp_path, monkeypatch, hidden, given):
    (tmp_path / "runs" / hidden).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert closest_existing(f"runs/{given}") is None


def test_a_visible_name_beside_hidden_ones_still_is(tmp_path, monkeypatch):
    for name in (".sft.out-lock", ".sft", "sft"):
        (tmp_path / "runs" / name).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert str(closest_existing("runs/sf")) == "runs/sft"


def test_a_missing_path_whose_lock_is_held_is_a_run_starting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with out_lock("runs/conc", "trainer.run_dir"):  # as `mfsdp train` holds it while starting
        assert (tmp_path / "runs" / ".conc.out-lock").exists()
        with pytest.raises(layout.CheckpointPathError) as err:
            checkpoint_resolution.resolve_checkpoint("runs/conc")
        done = CliRunner().invoke(app, ["ckpt", "validate", "runs/conc"])
    message = str(err.value)
    assert f"a run is starting there (pid {os.getpid()})" in message, message
    assert message.endswith("no checkpoint yet") and "out-lock" not in message
    assert done.exit_code == 2, done.output
    one_error(done.stderr, "runs/conc", f"(pid {os.getpid()})", "no checkpoint yet")


def test_a_lock_file_nobody_holds_is_no_hint(tmp_path, monkeypatch):
    """A killed run's lock file (flock dropped with its holder) says nothing is under way."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / ".conc.out-lock").write_text("4242\n")
    with pytest.raises(layout.CheckpointPathError) as err:
        checkpoint_resolution.resolve_checkpoint("runs/conc")
    assert str(err.value) == (
        f"runs/conc: no such file or directory; relative paths are read from {tmp_path}"
    )


def test_data_file_hints_pass_hidden_tables_over(tmp_path):
    """A directory given as a data file is answered with the tables in it: not a table's
    temp file nor macOS's `._train.parquet`."""
    (tmp_path / "sft").mkdir()
    for name in ("train.parquet", "._train.parquet", ".train.parquet.1-0123456789abcdef.tmp"):
        (tmp_path / "sft" / name).write_bytes(b"")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "test.parquet").write_bytes(b"")
    assert data_files_in(tmp_path, levels=2) == [tmp_path / "sft" / "train.parquet"]


def test_a_hidden_name_mistyped_is_offered_the_hidden_name_meant(tmp_path, monkeypatch):
    """`h/.chekpoints/run` for `h/.checkpoints/run`: hidden names are offered for a hidden
    name, never an output's lock or work dir."""
    (tmp_path / "h" / ".checkpoints" / "run").mkdir(parents=True)
    (tmp_path / "h" / ".chekpoints.out-lock").mkdir()
    monkeypatch.chdir(tmp_path)
    assert str(closest_existing("h/.chekpoints/run")) == "h/.checkpoints/run"
    (tmp_path / "h" / ".checkpoints").rename(tmp_path / "h" / "gone")
    assert closest_existing("h/.chekpoints/run") is None
