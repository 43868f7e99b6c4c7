"""An early step of a run that was later continued with other settings is compared with the
config it was trained with: the smallest kept `config.until_step_N.yaml` with N at or past
it, else config.yaml.

Was: only `config.until_step_<that step>.yaml` was looked up, so step 2 of a run trained to
4 with `trainer.total_steps=4` and continued to 6 was compared with the later config.yaml
(total_steps 6): resumed with 4 it said "trainer.total_steps 6 -> 4" and kept total_steps 6
as the config step 2 was trained with; resumed with 6, a real change, it said nothing."""

from __future__ import annotations

import os

import yaml

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft

SETTINGS = (
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "checkpoint.save_every=2",
)


def _run_continued(tmp_path):
    """A run trained to step 4 with total_steps=4 (steps 2 and 4 saved), then stopped at 5
    of total_steps=6: its config.until_step_4.yaml holds 4, its config.yaml 6."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    base = tmp_path / "base"
    run_sft(tiny_config(data, base, *SETTINGS, "trainer.total_steps=4"))
    run_sft(tiny_config(data, base, *SETTINGS, "trainer.total_steps=6", "trainer.stop_at_step=5"))
    assert (
        yaml.safe_load((base / "config.until_step_4.yaml").read_text())["trainer"]["total_steps"]
        == 4
    )
    return data, base


def test_an_early_step_is_compared_with_the_config_it_was_trained_with(tmp_path, capsys):
    """Resumed with total_steps=6, a change since step 2 (trained with 4), though the
    run's config.yaml says 6."""
    data, base = _run_continued(tmp_path)
    resume = f"checkpoint.resume={base / 'global_step_2'}"
    capsys.readouterr()
    longer = tmp_path / "longer"
    run_sft(tiny_config(data, longer, *SETTINGS, "trainer.total_steps=6", resume))
    kept = longer / "config.until_step_2.yaml"
    assert (
        f"[sft] resumed with settings changed since step 2 (trained with"
        f" {base / 'config.until_step_4.yaml'}): trainer.total_steps 4 -> 6;"
        f" the config step 2 was trained with is kept as {kept}\n"
    ) in capsys.readouterr().err
    assert yaml.safe_load(kept.read_text())["trainer"]["total_steps"] == 4


def test_a_copy_with_fresh_mtimes_compares_a_step_with_the_config_named_for_it(tmp_path, capsys):
    """A run copied without its mtimes (`cp -r`): config.until_step_4.yaml looks older
    than step 4. Was: passed over for config.yaml (total_steps 6), so a resume of step 4
    with 6 said nothing; the file named for the step is its record."""
    data, base = _run_continued(tmp_path)
    manifest = base / "global_step_4" / "manifest.json"
    saved_at = manifest.stat().st_mtime
    os.utime(base / "config.until_step_4.yaml", (saved_at - 60, saved_at - 60))
    resume = f"checkpoint.resume={base / 'global_step_4'}"
    capsys.readouterr()
    run_sft(tiny_config(data, tmp_path / "copy", *SETTINGS, "trainer.total_steps=6", resume))
    assert (
        f"[sft] resumed with settings changed since step 4 (trained with"
        f" {base / 'config.until_step_4.yaml'}): trainer.total_steps 4 -> 6;"
    ) in capsys.readouterr().err
