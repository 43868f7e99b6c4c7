"""A symlink in the run dir where a run writes is refused, never written through: a run dir
copied from elsewhere held `config.yaml -> ../notes.txt` and `metrics.jsonl -> ../log.txt`,
and resuming into it replaced the notes with a config and appended records to the log."""

from __future__ import annotations

import os

import pytest

from trainer.config import SFTConfig, load_config, write_resolved_config
from trainer.metrics import METRICS_FILE, MetricsLogger, drop_steps_after
from trainer.run_dir_links import check_run_dir_entries
from trainer.run_files import RunDirLinkError

PRECIOUS = "precious\n"


def _linked(tmp_path, name: str, directory: bool = False):
    """`run/name` as a link to a file (or dir) outside the run dir; (run, what it leads to)."""
    run = tmp_path / "run"
    (run / name).parent.mkdir(parents=True, exist_ok=True)
    outside = tmp_path / "outside"
    if directory:
        outside.mkdir()
        (outside / "notes.txt").write_text(PRECIOUS)
    else:
        outside.write_text(PRECIOUS)
    (run / name).symlink_to(outside)
    return run, outside


def _refused(caught: pytest.ExceptionInfo, path) -> None:
    assert str(caught.value) == (
        f"{path}: a symlink; the run writes this name itself and never through a link, which"
        " would change what it leads to: move the link away, or choose another trainer.run_dir"
    )
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    "name",
    [
        "config.yaml",
        "config.until_step_2.yaml",
        "metrics.jsonl",
        "latest_checkpointed_iteration.txt",
        ".latest_checkpointed_iteration.txt.4242.tmp",
        "global_step_3.tmp",
        "tensorboard",
        "wandb",
        "rollout_model",
        "rollout_model/rank0/config.json",
    ],
)
def test_every_name_the_run_writes_is_checked_before_it_starts(tmp_path, name):
    run, _ = _linked(tmp_path, name, directory=not name.endswith((".yaml", ".jsonl")))
    with pytest.raises(RunDirLinkError) as caught:
        check_run_dir_entries(run)
    _refused(caught, run / name)
    assert (run / name).is_symlink()


def test_links_the_run_does_not_write_through_are_left_alone(tmp_path):
    """A step dir linked back from another disk is replaced whole by a save (a rename),
    never written into; a link of the user's own under another name is none of the run's."""
    run, _ = _linked(tmp_path, "global_step_2", directory=True)
    (run / "data").symlink_to(tmp_path)
    check_run_dir_entries(run)
    check_run_dir_entries(tmp_path / "missing")


def test_the_launching_process_refuses_a_link_before_anything_starts(tmp_path, monkeypatch):
    from cli.launch import load_checked_config

    monkeypatch.chdir(tmp_path)
    run, outside = _linked(tmp_path, METRICS_FILE)
    with pytest.raises(RunDirLinkError) as caught:
        load_checked_config(SFTConfig, None, [f"trainer.run_dir={run}"])
    _refused(caught, run / METRICS_FILE)
    assert outside.read_text() == PRECIOUS


@pytest.mark.parametrize("dangling", [False, True])
def test_config_files_are_not_written_through_a_link(tmp_path, dangling):
    run, outside = _linked(tmp_path, "config.yaml")
    if dangling:
        outside.unlink()
    with pytest.raises(RunDirLinkError) as caught:
        write_resolved_config(run, SFTConfig())
    _refused(caught, run / "config.yaml")
    assert outside.read_text() == PRECIOUS if not dangling else not outside.exists()
    assert (run / "config.yaml").is_symlink()


def test_metrics_are_neither_appended_nor_rewritten_through_a_link(tmp_path):
    run, outside = _linked(tmp_path, METRICS_FILE)
    outside.write_text('{"step": 1}\n{"step": 2}\n')
    kept = outside.read_text()
    with pytest.raises(RunDirLinkError) as caught:
        MetricsLogger(run, True, SFTConfig().trainer).log(1, {"train/loss": 1.0})
    _refused(caught, run / METRICS_FILE)
    with pytest.raises(RunDirLinkError):
        drop_steps_after(run, 1)
    assert outside.read_text() == kept


def test_a_link_that_appears_while_the_run_logs_is_not_followed(tmp_path):
    """The logger checked at start; a link made afterwards is refused as the file opens."""
    from mfsdp_ckpt.storage.byte_store import CheckpointFileError

    run = tmp_path / "run"
    logger = MetricsLogger(run, True, SFTConfig().trainer)
    logger.log(1, {"train/loss": 1.0})
    (run / METRICS_FILE).unlink()
    (tmp_path / "log.txt").write_text(PRECIOUS)
    (run / METRICS_FILE).symlink_to(tmp_path / "log.txt")
    with pytest.raises(CheckpointFileError, match="a symlink, not a regular file"):
        logger.log(2, {"train/loss": 1.0})
    assert (tmp_path / "log.txt").read_text() == PRECIOUS


def test_a_tracker_dir_that_is_a_link_to_a_directory_is_refused(tmp_path):
    run, outside = _linked(tmp_path, "tensorboard", directory=True)
    trainer = load_config(SFTConfig, None, ["trainer.logger=[console,tensorboard]"]).trainer
    with pytest.raises(RunDirLinkError) as caught:
        MetricsLogger(run, True, trainer)
    _refused(caught, run / "tensorboard")
    assert os.listdir(outside) == ["notes.txt"]
