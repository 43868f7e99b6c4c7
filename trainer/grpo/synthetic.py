"""A task a tiny model learns in CPU minutes: single-digit addition, answer after `####`.

Rows come in both of the project's formats (SFT `messages`, verl RL columns with
data_source `openai/gsm8k`, so the built-in GSM8K rule scores them). Used by the learning
tests and by `examples/grpo_tiny_cpu.yaml`:

    mfsdp data synthetic --out runs/addition
"""

from __future__ import annotations

import random
from pathlib import Path

from trainer.data.files import write_tables


def addition_problems(
    seed: int = 0, digits: int = 10, max_b: int | None = None
) -> list[tuple[int, int]]:
    """Every (a, b) with a below `digits` and b below `max_b` (default `digits`), in a seeded
    order."""
    pairs = [(a, b) for a in range(digits) for b in range(digits if max_b is None else max_b)]
    random.Random(seed).shuffle(pairs)
    return pairs


def rl_row(a: int, b: int, index: int) -> dict:
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": f"{a} + {b} ="}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(a + b)},
        "extra_info": {"split": "train", "index": index},
    }


# A decline starts with another token than an answer's "####": declining is one choice at the
# first token, and behind "####" the sums stay as the model learned them. ("#### ?" made "?"
# compete with the digits after "#### ", and tuning towards it left most answers wrong.)
DECLINE = "?"


def sft_row(a: int, b: int, answer: str | None = None) -> dict:
    answer = f"#### {a + b}" if answer is None else answer
    return {
        "messages": [
            {"role": "user", "content": f"{a} + {b} ="},
            {"role": "assistant", "content": answer},
        ]
    }


def write_addition_data(
    out_dir: str | Path,
    seed: int = 0,
    digits: int = 10,
    max_b: int | None = None,
    declines: int = 0,
) -> dict[str, Path]:
    """sft/train.parquet and rl/{train,test}.parquet (the RL test split is the train prompts: the
    point is to watch reward rise, not to generalize)."""
    out = Path(out_dir)
    pairs = addition_problems(seed, digits, max_b)
    rl = [rl_row(a, b, i) for i, (a, b) in enumerate(pairs)]
    sft = [sft_row(a, b) for a, b in pairs]
    sft += [sft_row(a, b, DECLINE) for a, b in pairs for _ in range(declines)]
    paths = {
        "sft": out / "sft" / "train.parquet",
        "rl_train": out / "rl" / "train.parquet",
        "rl_test": out / "rl" / "test.parquet",
    }
    write_tables({paths["sft"]: sft, paths["rl_train"]: rl, paths["rl_test"]: rl[:32]})
    return paths
