"""A step of another run resumed into a run dir that has a config.yaml of its own (was: that
file was replaced by the run's without a word). With this run's settings it is replaced and
the note names it and the step resumed; with other settings, or unreadable, the resume is
refused before anything is written, naming it."""

from __future__ import annotations

import pytest
import yaml

from mfsdp_ckpt.format.layout import CheckpointPaths
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import SFTConfig, load_config, write_resolved_config
from trainer.config_history import OwnConfigError, keep_changed_config
from trainer.sft import run_sft


def _config(run_dir, *overrides: str) -> SFTConfig:
    return load_config(SFTConfig, None, [f"trainer.run_dir={run_dir}", *overrides])


def _step_of(base) -> CheckpointPaths:
    step_dir = base / "global_step_2"
    return CheckpointPaths(dist_ckpt=step_dir / "dist_ckpt", step_dir=step_dir, run_dir=base)


def test_an_own_config_with_other_settings_is_refused_and_left_as_it_is(tmp_path):
    base, new = tmp_path / "base", tmp_path / "new"
    write_resolved_config(base, _config(base, "optim.lr=0.003"))
    write_resolved_config(new, _config(new, "optim.lr=0.5"))
    before = (new / "config.yaml").read_text()
    with pytest.raises(OwnConfigError) as refused:
        keep_changed_config(new, 2, _config(new, "optim.lr=0.1"), _step_of(base))
    message = str(refused.value)
    assert message.startswith(f"{new / 'config.yaml'}: records other settings than this run's")
    assert "optim.lr 0.5 -> 0.1" in message
    assert f"resuming {base / 'global_step_2'} into {new}" in message
    assert "\n" not in message
    assert (new / "config.yaml").read_text() == before
    assert not list(new.glob("config.until_step_*.yaml"))


def test_an_unreadable_own_config_is_refused(tmp_path):
    base, new = tmp_path / "base", tmp_path / "new"
    write_resolved_config(base, _config(base))
    new.mkdir()
    (new / "config.yaml").write_text("{{{\n")
    with pytest.raises(OwnConfigError, match="cannot be read"):
        keep_changed_config(new, 2, _config(new), _step_of(base))
    assert (new / "config.yaml").read_text() == "{{{\n"


def test_an_own_config_with_this_runs_settings_is_named_as_replaced(tmp_path):
    base, new = tmp_path / "base", tmp_path / "new"
    write_resolved_config(base, _config(base))
    write_resolved_config(new, _config(new))
    note = keep_changed_config(new, 2, _config(new), _step_of(base))
    assert note == (
        f"{new / 'config.yaml'} (the same settings) is replaced by this run's config,"
        f" resumed from {base / 'global_step_2'}"
    )


def test_the_note_of_changed_settings_also_names_the_own_config_replaced(tmp_path):
    base, new = tmp_path / "base", tmp_path / "new"
    write_resolved_config(base, _config(base, "optim.lr=0.003"))
    write_resolved_config(new, _config(new, "optim.lr=0.1"))
    note = keep_changed_config(new, 2, _config(new, "optim.lr=0.1"), _step_of(base))
    assert note is not None
    assert note.startswith(
        f"resumed with settings changed since step 2 (trained with {base / 'config.yaml'}):"
        " optim.lr 0.003 -> 0.1;"
    )
    assert note.endswith(
        f"; {new / 'config.yaml'} (the same settings) is replaced by this"
        f" run's config, resumed from {base / 'global_step_2'}"
    )


def test_a_run_resuming_another_runs_step_leaves_the_users_config_in_place(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    settings = ("data.global_batch_size=8", "data.max_tokens_per_micro_batch=256")
    base, new = tmp_path / "base", tmp_path / "new"
    run_sft(tiny_config(data, base, *settings, "trainer.total_steps=4", "trainer.stop_at_step=2"))
    new.mkdir()
    (new / "config.yaml").write_text("optim:\n  lr: 0.5  # mine\n")
    resume = f"checkpoint.resume={base / 'global_step_2'}"
    with pytest.raises(OwnConfigError):
        run_sft(tiny_config(data, new, *settings, "trainer.total_steps=4", resume))
    assert (new / "config.yaml").read_text() == "optim:\n  lr: 0.5  # mine\n"
    assert yaml.safe_load((base / "config.yaml").read_text())["optim"]["lr"] == 0.003
