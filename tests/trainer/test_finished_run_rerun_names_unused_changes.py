"""A rerun of a finished run with a setting changed (`optim.lr`, a mistyped override) said
only "nothing left to train": no sign that the change went unused, where a resume that
trains names each changed key. It is named in the resume's words, as unused; the run
writes no config, so config.yaml still records the settings its steps were trained with and
no `config.until_step_N.yaml` is kept."""

from __future__ import annotations

from dataclasses import replace

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import RESOLVED_CONFIG_FILE, SFTConfig, write_resolved_config
from trainer.config_history import unused_changes_note
from trainer.sft import run_sft


def test_the_changes_are_named_as_unused_and_nothing_is_kept(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    before = SFTConfig()
    write_resolved_config(run, before)
    recorded = (run / RESOLVED_CONFIG_FILE).read_bytes()
    note = unused_changes_note(run, 2, replace(before, optim=replace(before.optim, lr=0.1)))
    assert note == (
        f"settings changed since step 2: optim.lr {before.optim.lr!r} -> 0.1; nothing is left"
        f" to train with them, and {run / RESOLVED_CONFIG_FILE} still records those step 2 was"
        " trained with"
    )
    assert unused_changes_note(run, 2, before) is None
    assert (run / RESOLVED_CONFIG_FILE).read_bytes() == recorded
    assert sorted(p.name for p in run.iterdir()) == [RESOLVED_CONFIG_FILE]


def test_a_rerun_of_a_finished_run_names_its_changed_settings(tmp_path, capsys):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    settings = ("data.global_batch_size=8", "trainer.total_steps=2")
    run_sft(tiny_config(data, run, *settings))
    recorded = (run / RESOLVED_CONFIG_FILE).read_bytes()
    capsys.readouterr()
    run_sft(tiny_config(data, run, *settings, "optim.lr=1e-3"))
    said = capsys.readouterr().err
    assert "[sft] settings changed since step 2: optim.lr " in said, said
    assert "-> 0.001; nothing is left to train with them, and" in said
    assert "nothing left to train (raise trainer.total_steps" in said
    assert (run / RESOLVED_CONFIG_FILE).read_bytes() == recorded
    assert not (run / "config.until_step_2.yaml").exists()
