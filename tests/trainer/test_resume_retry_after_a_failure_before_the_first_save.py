"""A step of another run resumed into a new run dir, run again after the first attempt failed
before its first save (out of memory, say) with one setting lowered (was: refused, "records
other settings than this run's ... move it away", though the config.yaml kept there was the
failed attempt's own, which trained nothing, and a fresh start replaced such a file without a
word). That file is replaced and the note names the settings changed since it; one recording
another step, or the run dir's own steps, is still refused."""

from __future__ import annotations

import re

import pytest
import yaml

from mfsdp_ckpt.format import checkpoint_resolution, run_steps
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import RESOLVED_CONFIG_FILE, write_resolved_config
from trainer.config_history import OwnConfigError, keep_changed_config
from trainer.sft import run_sft

SETTINGS = ("data.global_batch_size=8", "checkpoint.save_every=2", "trainer.total_steps=4")
FIRST = "data.max_tokens_per_micro_batch=512"
LOWERED = "data.max_tokens_per_micro_batch=256"


@pytest.fixture
def base(tmp_path):
    """Run `base` with complete steps 2 and 4, and its training rows."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "base"
    run_sft(tiny_config(data, run, *SETTINGS, FIRST))
    assert run_steps.list_complete_steps(run) == [2, 4]
    return data, run


def _first_attempt(data, run_dir, resume: str) -> None:
    """What a resume of `resume` into `run_dir` leaves when it fails before its first save:
    the config.yaml the run writes as it starts, and no step."""
    write_resolved_config(run_dir, tiny_config(data, run_dir, *SETTINGS, FIRST, resume))


def test_the_retry_replaces_the_failed_attempts_config_and_trains(base, tmp_path, capsys):
    data, run = base
    new = tmp_path / "new"
    resume = f"checkpoint.resume={run / 'global_step_2'}"
    _first_attempt(data, new, resume)
    capsys.readouterr()
    run_sft(tiny_config(data, new, *SETTINGS, LOWERED, resume))
    note = capsys.readouterr().err
    assert (
        f"; {new / RESOLVED_CONFIG_FILE} (an earlier run from the same step that saved none:"
        f" data.max_tokens_per_micro_batch 512 -> 256) is replaced by this run's config,"
        f" resumed from {run / 'global_step_2'}"
    ) in note
    assert run_steps.list_complete_steps(new) == [4]
    recorded = yaml.safe_load((new / RESOLVED_CONFIG_FILE).read_text())
    assert recorded["data"]["max_tokens_per_micro_batch"] == 256


def test_the_same_step_spelled_otherwise_is_the_same_resume(base, tmp_path, monkeypatch):
    """Recorded relative to where the first attempt started, named now by its dist_ckpt."""
    data, run = base
    monkeypatch.chdir(tmp_path)
    _first_attempt(data, "new", "checkpoint.resume=base/global_step_2")
    resumed = checkpoint_resolution.resolve_checkpoint(run / "global_step_2" / "dist_ckpt")
    retry = tiny_config(
        data, tmp_path / "new", *SETTINGS, LOWERED, f"checkpoint.resume={resumed.dist_ckpt}"
    )
    note = keep_changed_config(tmp_path / "new", 2, retry, resumed)
    assert note is not None
    assert "(an earlier run from the same step that saved none:" in note


def test_an_attempt_from_another_step_is_still_refused(base, tmp_path):
    data, run = base
    new = tmp_path / "new"
    _first_attempt(data, new, f"checkpoint.resume={run / 'global_step_4'}")
    before = (new / RESOLVED_CONFIG_FILE).read_text()
    resume = f"checkpoint.resume={run / 'global_step_2'}"
    with pytest.raises(
        OwnConfigError, match=re.escape("move it away, or give another trainer.run_dir")
    ):
        run_sft(tiny_config(data, new, *SETTINGS, LOWERED, resume))
    assert (new / RESOLVED_CONFIG_FILE).read_text() == before
    assert run_steps.list_complete_steps(new) == []


def test_a_relative_step_is_the_same_resume_spelled_alike_where_its_start_is_unknown(
    base, tmp_path, monkeypatch
):
    """An absolute run dir records nothing of where the first attempt started."""
    data, _ = base
    new = tmp_path / "new"
    monkeypatch.chdir(tmp_path)
    resume = "checkpoint.resume=base/global_step_2"
    _first_attempt(data, new, resume)
    retry = tiny_config(data, new, *SETTINGS, LOWERED, resume)
    note = keep_changed_config(
        new, 2, retry, checkpoint_resolution.resolve_checkpoint("base/global_step_2")
    )
    assert note is not None
    assert "(an earlier run from the same step that saved none:" in note
