"""A config asking for what this machine lacks is refused before anything starts.

`rollout.name=vllm` without vLLM was a long traceback per rank once the model had loaded
(seconds in), exit 1, nothing on stdout under --json; `strategy.name=megatron_fsdp` on a
CPU machine launched torchrun and loaded the model before its (good) one line. A package
is hidden here as Python itself blocks an import: `sys.modules[name] = None`."""

from __future__ import annotations

import json
import sys

import pytest

from tests.support.fresh_python import mfsdp
from tests.support.missing_package import mfsdp_without
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError


def _rl_rows(path) -> str:
    row = {
        "prompt": [{"role": "user", "content": "What is 3 + 4?"}],
        "data_source": "openai/gsm8k",
        "reward_model": {"style": "rule", "ground_truth": "7"},
    }
    path.write_text(json.dumps(row) + "\n")
    return str(path)


@pytest.mark.parametrize("ranks", ["1", "2"])
def test_vllm_rollout_without_vllm_is_one_line_exit_2_before_launch(tmp_path, ranks):
    run_dir = tmp_path / "run"
    data = _rl_rows(tmp_path / "rl.jsonl")
    done = mfsdp_without(
        "vllm",
        "train",
        "grpo",
        "--config",
        "examples/grpo_tiny_cpu.yaml",
        "--nproc-per-node",
        ranks,
        "rollout.name=vllm",
        f"data.train_files=[{data}]",
        "data.val_files=[]",
        "trainer.eval_every=0",
        f"trainer.run_dir={run_dir}",
        "--json",
    )
    assert done.returncode == 2, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error.startswith("rollout.name=vllm: vLLM is not installed"), error
    assert "install_vllm_cpu.sh" in error and "rollout.name=hf" in error
    assert done.stderr.strip().splitlines() == [f"error: {error}"]
    assert not run_dir.exists()  # nothing started


def test_megatron_fsdp_on_a_cpu_machine_is_refused_before_launch(tmp_path):
    run_dir = tmp_path / "run"
    data = write_chat_jsonl(tmp_path / "chat.jsonl", rows=4)
    done = mfsdp(
        "train",
        "sft",
        "--config",
        "examples/sft_tiny_cpu.yaml",
        "--nproc-per-node",
        "2",
        "strategy.name=megatron_fsdp",
        f"data.train_files=[{data}]",
        f"trainer.run_dir={run_dir}",
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: strategy.name=megatron_fsdp needs CUDA; use strategy.name=fsdp2 on CPU"
    ]
    assert "launching" not in done.stdout + done.stderr and not run_dir.exists()


def test_megatron_fsdp_not_installed_is_named(tmp_path):
    data = write_chat_jsonl(tmp_path / "chat.jsonl", rows=4)
    done = mfsdp_without(
        "megatron_fsdp",
        "train",
        "sft",
        "--config",
        "examples/sft_tiny_cpu.yaml",
        "strategy.name=megatron_fsdp",
        "trainer.device=auto",  # with `cpu` the config alone is refused (below)
        f"data.train_files=[{data}]",
        f"trainer.run_dir={tmp_path / 'run'}",
    )
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert line.startswith("error: strategy.name=megatron_fsdp: the megatron-fsdp package is not")
    assert "\n" not in line


def test_a_machine_lacking_both_is_told_one_line_before_launch(tmp_path):
    """Neither vLLM nor megatron-fsdp installed, both asked for: one of them named, in one
    line, and nothing started."""
    run_dir = tmp_path / "run"
    data = _rl_rows(tmp_path / "rl.jsonl")
    done = mfsdp_without(
        ("vllm", "megatron_fsdp"),
        "train",
        "grpo",
        "--config",
        "examples/grpo_tiny_cpu.yaml",
        "rollout.name=vllm",
        "strategy.name=megatron_fsdp",
        "trainer.device=auto",  # with `cpu` the config alone is refused, before the machine
        f"data.train_files=[{data}]",
        "data.val_files=[]",
        "trainer.eval_every=0",
        f"trainer.run_dir={run_dir}",
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        ("error: rollout.name=vllm: vLLM is not installed", "error: strategy.name=megatron_fsdp: ")
    ), lines[0]
    assert not run_dir.exists()


def test_a_rank_started_without_the_launcher_check_says_the_same(monkeypatch):
    """run_grpo called directly (a script, a test) picks its engine in the rank: the same
    line, a ConfigError (exit 2), not a RuntimeError."""
    from trainer.prerequisites import VLLM_MISSING
    from trainer.rollout.build import engine_name

    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ConfigError) as refused:
        engine_name("vllm")
    assert str(refused.value) == VLLM_MISSING
    assert engine_name("auto") == "hf"


def test_a_missing_data_file_is_named_before_what_the_machine_lacks(tmp_path):
    """The GPU example on a CPU machine, with a model that exists but no data: the missing
    data is the first thing to fix (it was reported after the CUDA refusal)."""
    from trainer.tiny import build_tiny_model_dir

    model = build_tiny_model_dir(tmp_path / "model", seed=0, with_weights=True)
    done = mfsdp(
        "train",
        "grpo",
        "--config",
        "examples/grpo_gsm8k_qwen.yaml",
        f"model.path={model}",
        f"trainer.run_dir={tmp_path / 'run'}",
    )
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: data.train_files: ") and "CUDA" not in line, done.stderr
