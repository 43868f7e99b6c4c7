"""A resumed run names the settings it changed and keeps the config steps 0..N used (was:
silent, and RUN/config.yaml replaced)."""

from __future__ import annotations

import yaml

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config_history import changed_keys
from trainer.sft import run_sft

SETTINGS = ("data.global_batch_size=8", "data.max_tokens_per_micro_batch=256")


def test_changed_keys_name_each_dotted_key_with_both_values():
    earlier = {"optim": {"lr": 0.003, "betas": [0.9, 0.95]}, "trainer": {"stop_at_step": 2}}
    now = {"optim": {"lr": 0.1, "betas": [0.9, 0.95]}, "trainer": {"stop_at_step": None}}
    assert changed_keys(earlier, now) == ["optim.lr 0.003 -> 0.1"]  # stopping early trains alike
    assert changed_keys({"a": 1}, {"b": 2}) == ["new key b = 2", "a = 1 (no longer a key)"]


def test_a_resume_with_another_lr_says_so_and_keeps_the_earlier_config(tmp_path, capsys):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4", "trainer.stop_at_step=2"))
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4", "optim.lr=0.1"))
    err = capsys.readouterr().err
    kept = run / "config.until_step_2.yaml"
    changed = "resumed with settings changed since step 2: optim.lr 0.003 -> 0.1; the config"
    assert f"{changed} step 2 was trained with is kept as {run}" in err, err
    assert str(kept) in err
    assert yaml.safe_load(kept.read_text())["optim"]["lr"] == 0.003
    assert yaml.safe_load((run / "config.yaml").read_text())["optim"]["lr"] == 0.1


def test_a_resume_with_the_same_settings_keeps_no_copy(tmp_path, capsys):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4", "trainer.stop_at_step=2"))
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4"))
    assert "resumed with settings changed" not in capsys.readouterr().err
    assert not list(run.glob("config.until_step_*.yaml"))


def test_a_resume_applies_changed_optimizer_settings(tmp_path):
    """The checkpoint's param groups carried the settings the run started with: steps after a
    resume with optim.eps=1.0 were bit for bit those of the unchanged run."""
    from tests.support.metrics import read_metrics

    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    losses = {}
    for name, changed in (("same", ()), ("eps", ("optim.eps=1.0",))):
        run = tmp_path / name
        run_sft(
            tiny_config(data, run, *SETTINGS, "trainer.total_steps=4", "trainer.stop_at_step=2")
        )
        run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4", *changed))
        losses[name] = [r["train/loss"] for r in read_metrics(run) if r.get("step", 0) == 4]
    assert losses["same"] and losses["eps"] and losses["same"] != losses["eps"], losses


def test_a_resume_that_trains_no_step_leaves_the_config_alone(tmp_path, capsys):
    """A resume with lr 0.5 that had nothing left to train rewrote config.yaml with lr 0.5,
    while every saved step was trained with 0.003. The change is named as unused, not as a
    resume's (`test_finished_run_rerun_names_unused_changes`)."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=2"))
    before = (run / "config.yaml").read_bytes()
    capsys.readouterr()
    for end in ("trainer.total_steps=2", "trainer.total_steps=1"):
        run_sft(tiny_config(data, run, *SETTINGS, end, "optim.lr=0.5"))
        err = capsys.readouterr().err
        assert "nothing left to train" in err and "resumed with settings" not in err, err
        assert "optim.lr 0.003 -> 0.5" in err and "; nothing is left to train with them" in err
        assert (run / "config.yaml").read_bytes() == before
        assert not list(run.glob("config.until_step_*.yaml"))


def test_a_second_resume_from_the_same_step_keeps_what_that_step_was_trained_with(tmp_path, capsys):
    """A resume with lr 0.05 whose step 3 was then removed left config.yaml saying 0.05; a
    second resume from step 2 (lr 0.07) replaced config.until_step_2.yaml with it, so no
    file said 0.003 any more, and the note said `0.05 -> 0.07`."""
    import shutil

    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    steps = (*SETTINGS, "trainer.total_steps=4")
    run_sft(tiny_config(data, run, *steps, "trainer.stop_at_step=2"))
    run_sft(tiny_config(data, run, *steps, "trainer.stop_at_step=3", "optim.lr=0.05"))
    shutil.rmtree(run / "global_step_3")  # a step the user did not want
    capsys.readouterr()
    run_sft(tiny_config(data, run, *steps, "trainer.stop_at_step=3", "optim.lr=0.07"))
    kept = run / "config.until_step_2.yaml"
    assert (
        "[sft] resumed with settings changed since step 2: optim.lr 0.003 -> 0.07;"
        f" the config step 2 was trained with is kept as {kept}\n"
    ) in capsys.readouterr().err
    assert yaml.safe_load(kept.read_text())["optim"]["lr"] == 0.003
    assert yaml.safe_load((run / "config.yaml").read_text())["optim"]["lr"] == 0.07


def test_a_section_an_older_record_lacks_is_named_key_by_key():
    """An mfsdp that had no `reward` section recorded none: a key of it set now is named as
    that key, and one at its default is no change (the section was named whole)."""
    defaults = {"optim": {"lr": 1.0}, "reward": {"a": 1, "b": 2}}
    earlier = {"optim": {"lr": 1.0}}
    assert changed_keys(earlier, {"optim": {"lr": 1.0}, "reward": {"a": 1, "b": 3}}, defaults) == [
        "new key reward.b = 3"
    ]
    assert changed_keys(earlier, {"optim": {"lr": 1.0}, "reward": {"a": 1, "b": 2}}, defaults) == []
