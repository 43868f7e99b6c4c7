"""mfsdp's own `optim.betas` stands beside verl's keys: an SFT `engine.*` key (even one noted
as ignored) replaced the betas of mfsdp's own file or command line with Megatron's, and a
run resumed with the same command changed its optimizer. Megatron's betas apply where the
optimizer section is verl's Megatron one (its class, a script's `optim=megatron`). Hydra's
selections given to `mfsdp train` are refused once, as typed, with no note before; mfsdp's
own keys at a value only verl takes get mfsdp's message; a literal backtick verl receives is
refused as Hydra refuses it."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO, repo_env
from tests.support.sft import TINY_CONFIG, tiny_config, write_chat_jsonl
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.sft import run_sft
from trainer.verl_import import convert_verl
from trainer.verl_source import VerlSourceError

MEGATRON = [0.9, 0.999]
MFSDP_SFT = [0.9, 0.95]  # examples/sft_tiny_cpu.yaml's, and mfsdp's SFT default
OWN = [0.8, 0.9]
ENGINE_KEYS = (
    "engine.tensor_model_parallel_size=1",
    "engine.use_mbridge=false",
    "engine._target_=verl.workers.config.McoreEngineConfig",
    "engine.use_megatron_fsdp=true",
    "engine.override_ddp_config={}",
)
SFT_SCRIPT = "torchrun -m verl.trainer.sft_trainer data.train_files=/d/t.parquet model.path=/m"


def _betas(cls: type, path: Path | None, overrides: list[str], caplog) -> list[float]:
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        betas = list(load_config(cls, path, overrides).optim.betas)
    assert "Megatron" not in caplog.text, caplog.text
    return betas


@pytest.mark.parametrize("engine", ENGINE_KEYS)
def test_an_engine_key_keeps_the_command_lines_betas_in_either_order(engine, caplog):
    assert _betas(SFTConfig, None, ["optim.betas=[0.8,0.9]", engine], caplog) == OWN
    assert _betas(SFTConfig, None, [engine, "optim.betas=[0.8,0.9]"], caplog) == OWN


@pytest.mark.parametrize("engine", ENGINE_KEYS)
def test_an_engine_key_keeps_the_files_betas_and_mfsdps_default(engine, tmp_path, caplog):
    # the tiny file trains on the CPU, where megatron_fsdp (use_megatron_fsdp) is refused
    assert _betas(SFTConfig, TINY_CONFIG, [engine, "trainer.device=auto"], caplog) == MFSDP_SFT
    assert _betas(SFTConfig, None, [engine], caplog) == MFSDP_SFT
    key, value = engine.split("=", 1)
    section, name = key.split(".", 1)
    own = tmp_path / "own.yaml"
    own.write_text(f"optim:\n  betas: [0.8, 0.9]\n{section}:\n  {name}: {value or 'null'}\n")
    assert _betas(SFTConfig, own, [], caplog) == OWN


def test_sft_and_grpo_agree_beside_megatron_keys(caplog):
    grpo = [
        "optim.betas=[0.8,0.9]",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1",
    ]
    sft = ["optim.betas=[0.8,0.9]", "engine.tensor_model_parallel_size=1"]
    assert _betas(GRPOConfig, None, grpo, caplog) == _betas(SFTConfig, None, sft, caplog) == OWN


def test_verls_megatron_optimizer_still_trains_megatrons_betas(tmp_path):
    printed = ["optim._target_=verl.workers.config.McoreOptimizerConfig"]
    assert load_config(SFTConfig, None, printed).optim.betas == MEGATRON
    assert load_config(SFTConfig, None, [*printed, "optim.betas=[0.8,0.9]"]).optim.betas == MEGATRON
    script = tmp_path / "sft.sh"
    script.write_text(f"{SFT_SCRIPT} engine=megatron optim=megatron optim.betas=[0.8,0.9]\n")
    assert convert_verl(script).tree["optim"]["betas"] == MEGATRON


def test_a_resume_with_the_same_command_keeps_the_betas(tmp_path, capsys):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    same = ("engine.tensor_model_parallel_size=1", "trainer.total_steps=2")
    run_sft(tiny_config(data, run, *same, "trainer.stop_at_step=1"))
    capsys.readouterr()
    run_sft(tiny_config(data, run, *same))
    assert "resumed with settings changed" not in capsys.readouterr().err
    assert "- 0.95" in (run / "config.yaml").read_text()


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("engine=megatron", "unknown config key 'engine': engine=megatron selects a file"),
        ("optim=megatron", "override: optim=megatron selects a file of verl's config"),
        ("model_engine=megatron", "key 'model_engine': model_engine=megatron selects a file"),
        ("model=hf_model", "override: model=hf_model selects a file of verl's config"),
        ("optim=adamw", "config key 'optim' expects a section"),  # no file of verl's
        ("engine=fsdp3", "unknown config key 'engine'"),
    ],
)
@pytest.mark.parametrize("with_file", [True, False])
def test_a_selection_is_refused_once_as_typed(typed, said, with_file, tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=4)
    given = ["--config", str(TINY_CONFIG)] if with_file else ["model.shape=tiny"]
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "train", "sft", *given, f"data.train_files={data}"]
        + [f"trainer.run_dir={tmp_path / 'run'}", typed],
        cwd=REPO,
        env=repo_env(),
        capture_output=True,
        text=True,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert said in lines[0] and "betas" not in lines[0].split("(")[0], lines[0]
    # a verl user is sent to the converter only for what is one of verl's files
    assert ("mfsdp config from-verl" in lines[0]) == ("selects a file" in said), lines[0]


@pytest.mark.parametrize(
    ("file", "override", "said"),
    [
        (
            "trainer:\n  logger: [console, file]\n",
            "trainer.logger=[console,file]",
            "'trainer.logger[1]' expects one of console | jsonl | tensorboard | wandb, got file",
        ),
        (
            "trainer:\n  device: npu\n",
            "trainer.device=npu",
            "'trainer.device' expects one of auto | cpu | cuda, got",
        ),
    ],
)
def test_mfsdps_own_keys_get_mfsdps_message(file, override, said, tmp_path):
    own = tmp_path / "own.yaml"
    own.write_text(file)
    for path, overrides in ((own, []), (None, [override])):
        with pytest.raises(ConfigError) as err:
            load_config(SFTConfig, path, ["model.shape=tiny", *overrides])
        assert said in str(err.value) and "verl key" not in str(err.value)


def test_a_verl_script_keeps_verls_message(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(f"{SFT_SCRIPT} trainer.logger=[console,file] trainer.device=npu\n")
    dropped = convert_verl(script).dropped
    assert any("verl's file logger" in item for item in dropped), dropped
    assert any(item.startswith("trainer.device=npu: npu:") for item in dropped), dropped


def test_a_key_of_the_other_trainer_says_so_first():
    with pytest.raises(ConfigError, match="is for mfsdp train grpo, not sft"):
        load_config(SFTConfig, None, ["actor_rollout_ref.actor.kl_loss_type=full"])
    with pytest.raises(ConfigError, match="full-vocabulary KL is not available"):
        load_config(GRPOConfig, None, ["actor_rollout_ref.actor.kl_loss_type=full"])


LAUNCH = "python3 -m verl.trainer.main_ppo data.train_files=/d/t.parquet"


@pytest.mark.parametrize(
    "script",
    [
        f"{LAUNCH} trainer.experiment_name='a`b'\n",
        f"B='`'\n{LAUNCH} trainer.experiment_name=x${{B}}y\n",
        f'{LAUNCH} trainer.experiment_name="a\\`b"\n',
    ],
)
def test_a_literal_backtick_is_refused_as_hydra_refuses_it(script, tmp_path):
    source = tmp_path / "run.sh"
    source.write_text(script)
    with pytest.raises(VerlSourceError, match="Hydra refuses '`' outside quotes"):
        convert_verl(source)


def test_a_backquoted_substitution_bash_runs_is_left_as_written(tmp_path):
    source = tmp_path / "run.sh"
    source.write_text(f"{LAUNCH} trainer.experiment_name=run_`date +%s`\n")
    done = convert_verl(source)
    assert done.tree["trainer"]["experiment_name"] == "run_`date +%s`"
    assert done.incomplete == ["trainer.experiment_name=run_`date +%s`"]
    assert any("command substitution, not run here" in note for note in done.notes), done.notes
