"""Shared pieces for the SFT tests: a tiny chat dataset on disk and a tiny-run config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO, repo_env
from trainer.config import SFTConfig, load_config
from trainer.tiny import GSM8K_SUFFIX, synthetic_arithmetic

TINY_CONFIG = REPO / "examples" / "sft_tiny_cpu.yaml"


def write_chat_jsonl(path: Path, rows: int = 48, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        for row in synthetic_arithmetic(rows, seed=seed):
            messages = [
                {"role": "user", "content": f"{row['question']} {GSM8K_SUFFIX}"},
                {"role": "assistant", "content": row["answer"]},
            ]
            handle.write(json.dumps({"messages": messages}) + "\n")
    return path


def tiny_config(train_file: Path, run_dir: Path, *overrides: str) -> SFTConfig:
    """The embedded example config, pointed at a test's data and run dir, quiet and small."""
    return load_config(
        SFTConfig,
        TINY_CONFIG,
        [
            f"data.train_files={train_file}",
            f"trainer.run_dir={run_dir}",
            "trainer.progress_bar=false",
            "data.val_ratio=0",
            "trainer.eval_every=0",
            *overrides,
        ],
    )


def launch_sft(
    data: Path, run_dir: Path, *overrides: str, nproc: int = 1, timeout: int = 600
) -> tuple[dict, str]:
    """`python -m cli.train sft --json` on the embedded tiny config in a fresh process (ranks
    under torchrun), quiet and without a validation split; asserts that it succeeded and
    returns its JSON summary (the last line it prints) and its stderr."""
    command = [sys.executable, "-m", "cli.train", "sft", "--config", str(TINY_CONFIG)]
    command += ["--nproc-per-node", str(nproc), "--json", f"data.train_files={data}"]
    command += [f"trainer.run_dir={run_dir}", "trainer.progress_bar=false", "data.val_ratio=0"]
    done = subprocess.run(
        [*command, *overrides],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        env=repo_env(),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


# A tiny run's settings for comparing the first step's loss across model sources: every row
# in one step, no warm-up (the first step's lr is the peak), nothing resumed.
SHORT_RUN = (
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "optim.warmup_steps=0",
    "checkpoint.resume=disable",
)


def first_loss(data: Path, run_dir: Path, *overrides: str) -> float:
    """The first step's loss of a one-step SHORT_RUN over `data` with `overrides`."""
    from trainer.sft import run_sft

    result = run_sft(tiny_config(data, run_dir, *SHORT_RUN, "trainer.total_steps=1", *overrides))
    return result.losses[1]
