"""A fresh run into a run dir that holds a config.yaml (was: replaced by the run's own without
a word, whoever wrote it). One mfsdp did not write, the --config file itself included, is
refused before anything is built, for SFT and GRPO alike, and on a resume of another run's
step too; one an earlier run wrote there that saved no step (a first attempt that failed) is
replaced, and the note names the settings changed since it, wherever that run dir was then.
A run dir that is the current directory is refused unless it is a run already, which resumes
as before, or holds nothing a run does not write (a directory made for the run)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from mfsdp_ckpt.format import run_steps
from mfsdp_ckpt.format.layout import CheckpointPaths
from tests.support.grpo import grpo_config, write_rl_rows
from tests.support.paths import EXAMPLES
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import (
    RESOLVED_CONFIG_FILE,
    ConfigError,
    SFTConfig,
    load_config,
    write_resolved_config,
)
from trainer.config_history import OwnConfigError, keep_changed_config
from trainer.grpo.config import GRPOConfig
from trainer.grpo.runner import run_grpo
from trainer.sft import run_sft

SETTINGS = ("data.global_batch_size=8", "data.max_tokens_per_micro_batch=256")


@pytest.fixture
def data(tmp_path):
    return write_chat_jsonl(tmp_path / "train.jsonl", rows=16)


def _users_config(path, data, run) -> str:
    """A config of the user's, as one writes it (comments, the example's layout), naming
    `data` and `run`; written to `path`, its text returned."""
    text = EXAMPLES.joinpath("sft_tiny_cpu.yaml").read_text()
    text = text.replace("runs/demo/data/sft/train.parquet", f"[{data}]")
    text = text.replace("run_dir: runs/sft_tiny", f"run_dir: {run}  # mine")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def test_the_config_file_given_is_refused_as_the_run_dir_config(data, tmp_path):
    run = tmp_path / "exp1"
    mine = run / RESOLVED_CONFIG_FILE
    text = _users_config(mine, data, run)
    for overrides in ([], ["optim.lr=1e-3"]):  # the same settings, and a one-off override
        cfg = load_config(SFTConfig, mine, ["trainer.progress_bar=false", *overrides])
        with pytest.raises(OwnConfigError) as refused:
            run_sft(cfg)
        assert str(refused.value) == (
            f"{mine}: not a config mfsdp wrote (a file of yours, the --config file itself"
            f" maybe), and training into {run} would replace it with this run's config;"
            " keep it outside the run dir, or give another trainer.run_dir"
        )
        assert refused.value.exit_code == 2
        assert mine.read_text() == text
        assert sorted(p.name for p in run.iterdir()) == [RESOLVED_CONFIG_FILE]


def test_grpo_refuses_it_alike_before_its_models(tmp_path):
    prompts = write_rl_rows(tmp_path / "rl.jsonl")
    run = tmp_path / "run"
    run.mkdir()
    (run / RESOLVED_CONFIG_FILE).write_text("optim:\n  lr: 0.5  # mine\n")
    with pytest.raises(OwnConfigError, match="not a config mfsdp wrote"):
        run_grpo(grpo_config(prompts, run))
    assert sorted(p.name for p in run.iterdir()) == [RESOLVED_CONFIG_FILE]
    assert (run / RESOLVED_CONFIG_FILE).read_text() == "optim:\n  lr: 0.5  # mine\n"


def test_an_ordinary_fresh_run_writes_its_config_and_says_nothing_of_it(data, tmp_path, capsys):
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=2"))
    assert "config.yaml" not in capsys.readouterr().err
    assert yaml.safe_load((run / RESOLVED_CONFIG_FILE).read_text())["optim"]["lr"] == 0.003


def test_a_rerun_after_a_first_run_that_saved_nothing_replaces_its_config(
    data, tmp_path, capsys, monkeypatch
):
    """The first run's own config.yaml, given back as --config (as the demo's interrupted
    line says) with a setting lowered, and recorded relative to where it started."""
    monkeypatch.chdir(tmp_path)
    write_resolved_config("run", tiny_config(data, "run", *SETTINGS, "trainer.total_steps=2"))
    capsys.readouterr()
    again = load_config(SFTConfig, "run/config.yaml", ["optim.lr=0.001"])
    run_sft(again)
    said = capsys.readouterr().err
    assert (
        "[sft] run/config.yaml (an earlier run that saved no step: optim.lr 0.003 -> 0.001)"
        " is replaced by this run's config\n"
    ) in said, said
    assert run_steps.list_complete_steps("run") == [2]
    assert yaml.safe_load(Path("run/config.yaml").read_text())["optim"]["lr"] == 0.001


def test_a_config_of_a_moved_run_dir_that_saved_nothing_is_replaced(data, tmp_path, capsys):
    """mfsdp wrote it, for a run dir since moved (or copied: another run's config, which that
    run keeps): it records another run_dir, and trained nothing here. It is replaced, the
    note naming the settings changed since it (it was refused once, a false alarm)."""
    first, second = tmp_path / "first", tmp_path / "second"
    write_resolved_config(first, tiny_config(data, first, *SETTINGS, "trainer.total_steps=2"))
    shutil.move(first, second)
    capsys.readouterr()
    run_sft(tiny_config(data, second, *SETTINGS, "trainer.total_steps=2", "optim.lr=0.1"))
    said = capsys.readouterr().err
    assert (
        f"{second / RESOLVED_CONFIG_FILE} (an earlier run that saved no step: optim.lr 0.003"
        " -> 0.1) is replaced by this run's config"
    ) in said
    assert yaml.safe_load((second / RESOLVED_CONFIG_FILE).read_text())["optim"]["lr"] == 0.1


def test_a_users_config_is_kept_from_a_resume_of_another_runs_step_too(data, tmp_path):
    """With this run's settings it was replaced as "the same settings", comments and all."""
    base, new = tmp_path / "base", tmp_path / "new"
    write_resolved_config(base, tiny_config(data, base, *SETTINGS))
    text = _users_config(new / RESOLVED_CONFIG_FILE, data, new)
    step = base / "global_step_2"
    resumed = CheckpointPaths(dist_ckpt=step / "dist_ckpt", step_dir=step, run_dir=base)
    cfg = load_config(SFTConfig, new / RESOLVED_CONFIG_FILE, [f"checkpoint.resume={step}"])
    with pytest.raises(OwnConfigError, match=f"and resuming {step} into {new} would replace"):
        keep_changed_config(new, 2, cfg, resumed)
    assert (new / RESOLVED_CONFIG_FILE).read_text() == text


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
@pytest.mark.parametrize("given", [".", "./", "..", "HERE", "link-here"])
def test_the_current_directory_and_above_are_refused(cls, given, tmp_path, monkeypatch):
    from cli.launch import load_checked_config

    here = tmp_path / "project" / "work"
    here.mkdir(parents=True)
    (here / "train.py").write_text("")  # the user's files: a directory made for the run trains
    (tmp_path / "link-here").symlink_to(here)
    monkeypatch.chdir(here)
    run_dir = {"HERE": str(here), "link-here": str(tmp_path / "link-here")}.get(given, given)
    with pytest.raises(ConfigError) as refused:
        load_checked_config(cls, None, [f"trainer.run_dir={run_dir}"])
    real = (here / run_dir).resolve()
    named = run_dir if run_dir == str(real) else f"{run_dir} ({real})"
    assert str(refused.value) == (
        f"trainer.run_dir: {named} is the current directory or above it; name a new one"
        " (e.g. trainer.run_dir=runs/NAME)"
    )
    assert [path.name for path in here.iterdir()] == ["train.py"]


@pytest.mark.parametrize("given", [".", "HERE"])
def test_an_empty_current_directory_made_for_the_run_trains(data, given, tmp_path, monkeypatch):
    """`mkdir exp && cd exp`, then `trainer.run_dir=.` (or `$PWD`), as batch jobs run: nothing
    of the user's is there. A first run there that stopped before its first save (its
    config.yaml and metrics.jsonl) leaves it the run's own."""
    from cli.launch import load_checked_config

    here = tmp_path / "exp"
    here.mkdir()
    monkeypatch.chdir(here)
    run_dir = str(here) if given == "HERE" else given
    (here / RESOLVED_CONFIG_FILE).write_text("")  # an earlier attempt's files, nothing else
    (here / "metrics.jsonl").write_text("")
    overrides = [f"trainer.run_dir={run_dir}", f"data.train_files={data}"]
    cfg = load_checked_config(SFTConfig, str(EXAMPLES / "sft_tiny_cpu.yaml"), overrides)
    assert cfg.trainer.run_dir == run_dir
    (here / "notes.txt").write_text("mine")  # a file of the user's: refused again
    with pytest.raises(ConfigError, match="is the current directory or above it"):
        load_checked_config(SFTConfig, str(EXAMPLES / "sft_tiny_cpu.yaml"), overrides)


def test_a_run_given_as_the_current_directory_resumes(data, tmp_path, monkeypatch, capsys):
    from cli.launch import load_checked_config

    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4", "trainer.stop_at_step=2"))
    monkeypatch.chdir(run)
    overrides = ["trainer.run_dir=.", "trainer.stop_at_step=null"]
    cfg = load_checked_config(SFTConfig, str(run / RESOLVED_CONFIG_FILE), overrides)
    capsys.readouterr()
    result = run_sft(cfg)
    assert result.resumed_from == 2 and result.final_step == 4
    assert "config.yaml" not in capsys.readouterr().err
    assert run_steps.list_complete_steps(run) == [2, 4]
