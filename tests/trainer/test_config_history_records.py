"""A resume compares its settings with the record of the run dir that holds the resumed
step, and says so when there is none (was: a step of another run was compared with the new
run dir's config.yaml, which did not exist, and a missing or damaged config.yaml skipped the
comparison without a word, then was replaced by the run's own)."""

from __future__ import annotations

import yaml

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft

SETTINGS = ("data.global_batch_size=8", "data.max_tokens_per_micro_batch=256")
STEPS = (*SETTINGS, "trainer.total_steps=4")


def _base_run(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    base = tmp_path / "base"
    run_sft(tiny_config(data, base, *STEPS, "trainer.stop_at_step=2"))
    return data, base


def test_a_step_of_another_run_is_compared_with_the_config_it_was_trained_with(tmp_path, capsys):
    data, base = _base_run(tmp_path)
    capsys.readouterr()
    new = tmp_path / "new"
    resume = f"checkpoint.resume={base / 'global_step_2'}"
    run_sft(tiny_config(data, new, *STEPS, resume, "optim.lr=0.1", "optim.scheduler=constant"))
    kept = new / "config.until_step_2.yaml"
    assert (
        f"[sft] resumed with settings changed since step 2 (trained with {base / 'config.yaml'}):"
        " optim.lr 0.003 -> 0.1, optim.scheduler 'cosine' -> 'constant';"
        f" the config step 2 was trained with is kept as {kept}\n"
    ) in capsys.readouterr().err
    assert yaml.safe_load(kept.read_text())["optim"]["lr"] == 0.003
    assert yaml.safe_load((base / "config.yaml").read_text())["optim"]["lr"] == 0.003


def test_a_step_of_another_run_with_the_same_settings_is_quiet(tmp_path, capsys):
    data, base = _base_run(tmp_path)
    capsys.readouterr()
    new = tmp_path / "new"
    run_sft(tiny_config(data, new, *STEPS, f"checkpoint.resume={base / 'global_step_2'}"))
    err = capsys.readouterr().err
    assert "settings" not in err, err
    assert not list(new.glob("config.until_step_*.yaml"))


def test_a_damaged_config_is_named_and_kept_aside_before_it_is_replaced(tmp_path, capsys):
    data, base = _base_run(tmp_path)
    (base / "config.yaml").write_text("{{{\n")
    capsys.readouterr()
    run_sft(tiny_config(data, base, *STEPS, "optim.lr=0.1"))
    err = capsys.readouterr().err
    kept = base / "config.until_step_2.yaml"
    line = next(line for line in err.splitlines() if "not compared" in line)
    assert line.startswith(
        f"[sft] settings not compared with those step 2 was trained with: {base / 'config.yaml'}:"
        " not valid YAML"
    ), err
    assert line.endswith(f"; its bytes are kept as {kept}"), line
    assert kept.read_text() == "{{{\n"
    assert yaml.safe_load((base / "config.yaml").read_text())["optim"]["lr"] == 0.1


def test_a_missing_config_is_named(tmp_path, capsys):
    data, base = _base_run(tmp_path)
    (base / "config.yaml").unlink()
    capsys.readouterr()
    run_sft(tiny_config(data, base, *STEPS, "optim.lr=0.1"))
    assert (
        "[sft] settings not compared with those step 2 was trained with:"
        f" {base / 'config.yaml'}: missing\n"
    ) in capsys.readouterr().err


def test_a_step_of_another_run_whose_record_is_damaged_leaves_it_as_it_is(tmp_path, capsys):
    data, base = _base_run(tmp_path)
    (base / "config.yaml").write_text("- not a mapping\n")
    capsys.readouterr()
    new = tmp_path / "new"
    run_sft(tiny_config(data, new, *STEPS, f"checkpoint.resume={base / 'global_step_2'}"))
    assert (
        "[sft] settings not compared with those step 2 was trained with:"
        f" {base / 'config.yaml'}: not a mapping of config keys\n"
    ) in capsys.readouterr().err
    assert (base / "config.yaml").read_text() == "- not a mapping\n"
    assert not list(new.glob("config.until_step_*.yaml"))


def test_a_checkpoint_in_no_run_dir_is_said_to_have_no_record(tmp_path):
    from mfsdp_ckpt.format.layout import CheckpointPaths
    from trainer.config import SFTConfig
    from trainer.config_history import keep_changed_config

    bare = CheckpointPaths(dist_ckpt=tmp_path / "dist_ckpt")
    assert keep_changed_config(tmp_path / "new", 3, SFTConfig(), bare) == (
        f"settings not compared with those step 3 was trained with: {bare.dist_ckpt} is in no"
        " run dir, whose config.yaml records them"
    )
