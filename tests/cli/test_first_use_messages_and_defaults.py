"""What a first-time user met: a YAML mistake named at the top of the file, `./dev mfsdp`
installing vLLM after `MFSDP_SKIP_VLLM=1 ./dev demo`, a synthetic "test" split of training
prompts, a failed final GRPO validation that a rerun turned into exit 0, dtype keys sent to
verl keys that do nothing here, `mfsdp demo | head` ending 1, and an 80-column progress bar
that cut tokens/s off."""

from __future__ import annotations

import fcntl
import os
import platform
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.fresh_python import demo_with_stdout_closed
from tests.support.paths import REPO
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.grpo.runner import run_grpo
from trainer.grpo.synthetic import write_addition_data
from trainer.metrics import bar_postfix
from trainer.progress import step_bar

# --- 1. a YAML error is named at the line that is wrong


def _yaml_error(tmp_path: Path, text: str) -> str:
    config = tmp_path / "sft.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, config)
    return str(caught.value).removeprefix(f"{config}: ")


def test_a_key_indented_too_far_is_named_at_its_line_not_the_files_first_key(tmp_path):
    example = (REPO / "examples" / "sft_tiny_cpu.yaml").read_text().splitlines()
    first = next(i for i, line in enumerate(example) if line and not line.startswith("#"))
    bad = next(i for i, line in enumerate(example) if line.startswith("strategy:"))
    example[bad] = " " + example[bad]
    assert _yaml_error(tmp_path, "\n".join(example) + "\n") == (
        f"not valid YAML at line {bad + 1}, column 2: expected <block end>, but found"
        f" '<block mapping start>' (in the block mapping starting at line {first + 1})"
    )
    assert _yaml_error(tmp_path, "model:\n  shape: tiny\n optim:\n  lr: 1e-3\n") == (
        "not valid YAML at line 3, column 2: expected <block end>, but found"
        " '<block mapping start>' (in the block mapping starting at line 1)"
    )


def test_something_left_open_is_still_named_where_it_opened(tmp_path):
    """PyYAML meets the problem only where the text runs out: the opening is the mistake."""
    assert _yaml_error(tmp_path, "model:\n  shape: tiny\noptim:\n  lr: [1\n").startswith(
        "not valid YAML at line 4, column 7: while parsing a flow sequence"
    )
    assert _yaml_error(tmp_path, "model:\n  shape: 'tiny\noptim: 1\n").startswith(
        "not valid YAML at line 2, column 10: while scanning a quoted scalar"
    )


# --- 2. `./dev` remembers MFSDP_SKIP_VLLM=1 for its venv

STUB = """#!/bin/sh
echo "STUB $*"
case "$*" in
  *"import torch"*) exit 1;;
  *"find_spec('vllm')"*) exit 1;;
esac
exit 0
"""
INSTALLING = "[dev] installing vLLM's CPU build (about 3 minutes; MFSDP_SKIP_VLLM=1 skips it) ..."


def _dev(venv: Path, *args: str, skip: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MFSDP_SKIP_VLLM"}
    env["MFSDP_VENV"] = str(venv)
    if skip is not None:
        env["MFSDP_SKIP_VLLM"] = skip
    done = subprocess.run(
        [str(REPO / "dev"), *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_dev_remembers_a_skipped_vllm_until_told_otherwise(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "mfsdp"):
        (venv / "bin" / name).write_text(STUB)
        (venv / "bin" / name).chmod(0o755)
    assert INSTALLING not in _dev(venv, "setup", skip="1").stdout
    later = _dev(venv, "mfsdp", "ckpt", "validate", "runs/demo/sft")  # the variable not given
    assert INSTALLING not in later.stdout and "STUB ckpt validate runs/demo/sft" in later.stdout
    assert INSTALLING not in _dev(venv, "setup").stdout
    wanted = _dev(venv, "setup", skip="0").stdout  # forgotten: vLLM where it applies
    assert (INSTALLING in wanted) == (platform.machine() == "x86_64")


# --- 3. the synthetic RL test split holds prompts out of training


def _rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def test_the_synthetic_rl_test_split_is_held_out_and_labelled_test(tmp_path):
    out = tmp_path / "addition"
    done = CliRunner().invoke(app, ["data", "synthetic", "--out", str(out)])
    assert done.exit_code == 0, done.output
    train, test = _rows(out / "rl" / "train.parquet"), _rows(out / "rl" / "test.parquet")
    prompt = lambda row: row["prompt"][0]["content"]  # noqa: E731
    assert not {prompt(r) for r in train} & {prompt(r) for r in test}
    assert len(train) + len(test) == 100 and len(test) == 20
    assert {r["extra_info"]["split"] for r in train} == {"train"}
    assert {r["extra_info"]["split"] for r in test} == {"test"}
    sft = {r["messages"][0]["content"] for r in _rows(out / "sft" / "train.parquet")}
    assert {prompt(r) for r in test} <= sft  # the SFT warm start teaches every sum
    again = write_addition_data(tmp_path / "again", seed=0)
    other = write_addition_data(tmp_path / "other", seed=1)
    assert _rows(again["rl_test"]) == test
    assert {prompt(r) for r in _rows(other["rl_test"])} != {prompt(r) for r in test}


# --- 4. a failed final GRPO validation leaves the last step for the rerun to redo

FAILS_IN_VALIDATION = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if extra_info["split"] == "test":
        raise ValueError("boom")
    return min(len(solution_str), 8) / 8
"""


def _grpo(tmp_path: Path, files: dict[str, Path], reward: Path) -> list[str]:
    return [
        f"data.train_files={files['rl_train']}",
        f"data.val_files={files['rl_test']}",
        "data.max_prompt_length=32",
        "data.train_batch_size=2",
        "data.val_max_samples=2",
        "actor.ppo_mini_batch_size=2",
        "actor.ppo_micro_batch_size_per_gpu=4",
        "actor.log_prob_micro_batch_size_per_gpu=4",
        "rollout.n=2",
        "rollout.max_response_length=4",
        "rollout.name=hf",
        f"reward.path={reward}",
        "trainer.total_steps=2",
        "trainer.eval_every=0",
        f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.progress_bar=false",
        "trainer.device=cpu",
        "strategy.name=fsdp2",
        "checkpoint.save_every=1",
    ]


def test_a_failed_final_validation_is_said_and_redone_by_the_rerun(tmp_path):
    files = write_addition_data(tmp_path / "data", digits=4)
    reward = tmp_path / "reward.py"
    reward.write_text(FAILS_IN_VALIDATION)
    overrides = _grpo(tmp_path, files, reward)
    for _attempt in range(2):  # the rerun fails alike: it did exit 0, nothing left to train
        with pytest.raises(Exception) as caught:
            run_grpo(load_config(GRPOConfig, None, overrides))
        assert str(caught.value).startswith(
            "the final validation after step 2 failed, so step 2 is not saved (the same command"
            f" trains it again, then validates): reward.path '{reward}'"
        ), caught.value
        assert sorted(p.name for p in (tmp_path / "run").glob("global_step_*")) == ["global_step_1"]
    reward.write_text(FAILS_IN_VALIDATION.replace('raise ValueError("boom")', "return 0.0"))
    result = run_grpo(load_config(GRPOConfig, None, overrides))
    assert result.resumed_from == 1 and result.final_step == 2
    assert set(result.val_accuracy) == {2}


# --- 5. a dtype key is pointed to mfsdp's, before verl keys that do nothing here


def _suggested(override: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, None, [override])
    return str(caught.value).split("did you mean ", 1)[1]


@pytest.mark.parametrize("key", ["model.dtype", "dtype", "model.torch_dtype", "optim.param_dtype"])
def test_a_dtype_key_is_pointed_to_strategy_mixed_precision_first(key):
    assert _suggested(f"{key}=bf16").startswith("strategy.mixed_precision, ")


def test_mfsdps_keys_come_before_verl_keys_that_set_nothing_here():
    """verl's optim.weight_decay_incr_style sets nothing here (Megatron's constant decay only)."""
    assert _suggested("optim.weight_decays=0.1").startswith("optim.weight_decay, ")


# --- 6. `mfsdp demo | head` ends as every command does there: 141


def test_a_closed_stdout_stops_the_demo_with_141_and_says_a_rerun_starts_over(tmp_path):
    out = tmp_path / "d"
    code, err = demo_with_stdout_closed(out)  # as `| head -0` does
    assert code == 141
    assert err == (
        f"error: stdout closed; the demo stopped at writing the data and model; {out} is"
        f" incomplete; `mfsdp demo --out {out}` again starts over\n"
    )


# --- 7. the step bar's figures fit 80 columns


def _bar_line(monkeypatch, columns: int, record: dict) -> str:
    """The last line the trainer's step bar drew on a terminal `columns` wide."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    drawn = b""
    with os.fdopen(slave, "w") as terminal:
        monkeypatch.setattr(sys, "stderr", terminal)
        bar = step_bar("sft", 1000, 0, enabled=True)
        bar.set_postfix(bar_postfix(record), refresh=False)
        bar.update(999)
        bar.close()
        terminal.flush()
        while select.select([master], [], [], 0.2)[0]:
            drawn += os.read(master, 65536)
    os.close(master)
    return drawn.decode().replace("\r\n", "\r").split("\r")[-2]


SFT_RECORD = {
    "train/loss": 3.831,
    "train/lr": 4.81e-4,
    "train/grad_norm": 2.884,
    "perf/tokens_per_s": 3452.0,
    "perf/mfu": 0.123,
    "val/loss": 3.9001,
}


@pytest.mark.parametrize("mfu", [None, 0.123])
def test_every_figure_of_the_step_bar_shows_at_80_columns(monkeypatch, mfu):
    record = {**SFT_RECORD, "perf/mfu": mfu}
    line = _bar_line(monkeypatch, 80, record)
    assert len(line) <= 80, line
    for figure in ("loss=3.831", "lr=4.81e-4", "gnorm=2.884", "tok/s=3452", "val=3.9001"):
        assert figure in line, line
    assert ("mfu=12.3%" in line) == (mfu is not None), line


def test_a_wide_terminal_keeps_the_bar_graphic(monkeypatch):
    line = _bar_line(monkeypatch, 160, SFT_RECORD)
    assert "| 999/1000 [" in line and "tok/s=3452" in line and "mfu=12.3%" in line, line
