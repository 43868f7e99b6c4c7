"""GRPO really learns: a tiny model, warm-started by the SFT runner, raises its reward on a rule
task.

Warm start (two SFT runs): first the model learns single-digit addition ("a + b =" -> "#### a+b"),
then it is tuned on data where 9 of 10 answers decline ("?"), so it knows the sums but rarely
says them (reward asserted < 0.2 at the start). GRPO with the GSM8K rule reward must then raise
the mean reward above 0.5 within 10 steps. The decline starts with another token than "####":
declining is then one choice at the first token and the sums stay intact behind "####", so the
reward rises within a few steps. A decline of "#### ?" made "?" compete with the digits after
"#### ": the tuned model then answered wrong more often than right, GRPO had to relearn the
sums, and whether it crossed 0.5 within 30 steps depended on the CPU's rounding and the rollout
engine's seed. Broken advantages, a broken loss or a broken weight push leave the reward where
it started; the control run shows that for the weight push.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.export_hf import export_hf
from tests.support.metrics import read_metrics
from tests.support.paths import REPO
from trainer.config import SFTConfig, load_config
from trainer.grpo import runner
from trainer.grpo.config import GRPOConfig
from trainer.grpo.synthetic import write_addition_data
from trainer.rollout.vllm_engine import vllm_available
from trainer.sft import run_sft

pytestmark = pytest.mark.slow
STEPS = 10

SFT_COMMON = [
    "data.max_length=64",
    "data.global_batch_size=16",
    "data.max_tokens_per_micro_batch=512",
    "optim.warmup_steps=0",
    "optim.scheduler=constant",
    "trainer.progress_bar=false",
    "strategy.name=fsdp2",
    "trainer.log_every=1000",
    "trainer.device=cpu",
]


@pytest.fixture(scope="module")
def warm_start(grpo_warm_start):
    return grpo_warm_start  # built once per session (conftest.py): the LoRA test learns from it


def build_warm_start(root: Path) -> tuple[Path, dict]:
    know = write_addition_data(root / "know", digits=5)
    mix = write_addition_data(root / "mix", digits=5, declines=9)
    _sft_then_export(
        root / "sft1",
        root / "sft1_hf",
        [f"data.train_files={know['sft']}", "optim.lr=3e-3", "trainer.total_steps=200"],
    )
    _sft_then_export(
        root / "sft2",
        root / "warm",
        [
            f"model.path={root}/sft1_hf",
            f"data.train_files={mix['sft']}",
            "optim.lr=3e-4",
            "trainer.total_steps=100",
        ],
    )
    return root, know


def _sft_then_export(run_dir: Path, hf_dir: Path, overrides: list[str]) -> None:
    """One SFT run of the warm start (SFT_COMMON plus `overrides`), exported to `hf_dir`."""
    run_sft(load_config(SFTConfig, None, [*SFT_COMMON, *overrides, f"trainer.run_dir={run_dir}"]))
    export_hf(run_dir, hf_dir)


def _overrides(root: Path, know: dict, run: str, engine: str) -> list[str]:
    return [
        f"model.path={root}/warm",
        f"data.train_files={know['rl_train']}",
        # the prompts it trains on: what is asserted is that GRPO raised the reward there
        f"data.val_files={know['rl_train']}",
        "data.max_prompt_length=32",
        "data.train_batch_size=16",
        "actor.ppo_mini_batch_size=16",
        "actor.ppo_epochs=3",
        "actor.ppo_micro_batch_size_per_gpu=32",
        "actor.log_prob_micro_batch_size_per_gpu=64",
        "rollout.n=8",
        "rollout.max_response_length=6",
        f"rollout.name={engine}",
        "rollout.enforce_eager=true",
        "optim.lr=1e-3",
        f"trainer.total_steps={STEPS}",
        f"trainer.run_dir={root}/{run}",
        "trainer.eval_every=5",
        "trainer.val_before_train=true",
        "trainer.progress_bar=false",
        "trainer.device=cpu",
        "strategy.name=fsdp2",
        "checkpoint.save_every=0",
    ]


def _curve(run_dir: Path) -> tuple[list[float], list[float]]:
    records = read_metrics(run_dir)
    rewards = [r["reward/mean"] for r in records if "reward/mean" in r]
    val = [r["val/accuracy"] for r in records if "val/accuracy" in r]
    return rewards, val


def _assert_learned(run_dir: Path) -> None:
    rewards, val = _curve(run_dir)
    assert len(rewards) == STEPS
    assert rewards[0] < 0.2 and val[0] < 0.2, (rewards, val)
    assert sum(rewards[-5:]) / 5 > 0.5, rewards
    assert val[-1] > 0.5, val
    diffs = [
        r["rollout/actor_logprob_diff"]
        for r in read_metrics(run_dir)
        if "rollout/actor_logprob_diff" in r
    ]
    assert max(diffs) < 1e-4  # the engine samples from exactly the actor's weights, every step


def test_grpo_with_hf_rollout_learns(warm_start):
    root, know = warm_start
    runner.run_grpo(load_config(GRPOConfig, None, _overrides(root, know, "grpo_hf", "hf")))
    _assert_learned(root / "grpo_hf")


def test_without_weight_push_the_reward_stays_low(warm_start, monkeypatch):
    """Control: the rollout engine keeps the initial weights, so the policy that samples never
    improves."""
    root, know = warm_start
    real_push, pushes = runner.push_weights, []

    def push_once(run):
        if not pushes:
            real_push(run)
        pushes.append(1)

    monkeypatch.setattr(runner, "push_weights", push_once)
    runner.run_grpo(load_config(GRPOConfig, None, _overrides(root, know, "grpo_stale", "hf")))
    rewards, _ = _curve(root / "grpo_stale")
    assert len(pushes) == STEPS + 1
    assert sum(rewards[-5:]) / 5 < 0.3, rewards


@pytest.mark.skipif(
    not vllm_available(), reason="vLLM is not installed (scripts/install_vllm_cpu.sh)"
)
def test_grpo_with_vllm_rollout_learns(warm_start):
    root, know = warm_start
    # Own process: vLLM changes process-wide state (torch threads, distributed groups).
    env = {**os.environ, "OMP_NUM_THREADS": "2", "VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "cli.train", "grpo", "--json"]
        + _overrides(root, know, "grpo_vllm", "vllm"),
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["final_step"] == STEPS
    _assert_learned(root / "grpo_vllm")
