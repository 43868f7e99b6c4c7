"""Shared pieces for the SFT tests: a tiny chat dataset on disk and a tiny-run config."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.paths import REPO
from trainer.config import SFTConfig, load_config
from trainer.tiny import GSM8K_SUFFIX, synthetic_arithmetic


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
        REPO / "examples" / "sft_tiny_cpu.yaml",
        [
            f"data.train_files={train_file}",
            f"trainer.run_dir={run_dir}",
            "trainer.progress_bar=false",
            "data.val_ratio=0",
            "trainer.eval_every=0",
            *overrides,
        ],
    )
