"""A task a tiny model learns in CPU minutes: single-digit addition, answer after `####`.

Rows come in both of the project's formats (SFT `messages`, verl RL columns with
data_source `openai/gsm8k`, so the built-in GSM8K rule scores them). Used by the learning
tests and by `examples/grpo_tiny_cpu.yaml`:

    mfsdp data synthetic --out runs/addition
"""

from __future__ import annotations

import itertools
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


def held_out_count(problems: int) -> int:
    """How many of `problems` the RL test split holds out: a fifth, at least one, and at
    least one left to train on."""
    if problems < 2:
        raise ValueError(f"{problems} problem(s) cannot be split into train and test prompts")
    return max(1, problems // 5)


def rl_row(a: int, b: int, index: int, split: str = "train") -> dict:
    """One verl RL row; `extra_info.split` names its split, as `mfsdp data gsm8k` writes it,
    since a custom reward may branch on it."""
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": f"{a} + {b} ="}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(a + b)},
        "extra_info": {"split": split, "index": index},
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
    """sft/train.parquet and rl/{train,test}.parquet. The RL test split holds out the last
    fifth of the seeded order, prompts RL never trains on, so `val/accuracy` reads as
    held-out accuracy, as a verl user takes a test.parquet to mean. The SFT table teaches
    every sum: it is the warm start the learning runs begin from, and GRPO's part, answering
    rather than declining, is what the held-out prompts measure."""
    out = Path(out_dir)
    pairs = addition_problems(seed, digits, max_b)
    held_out = held_out_count(len(pairs))
    train, test = pairs[:-held_out], pairs[-held_out:]
    sft = itertools.chain(
        (sft_row(a, b) for a, b in pairs),
        (sft_row(a, b, DECLINE) for a, b in pairs for _ in range(declines)),
    )
    paths = {
        "sft": out / "sft" / "train.parquet",
        "rl_train": out / "rl" / "train.parquet",
        "rl_test": out / "rl" / "test.parquet",
    }
    write_tables(
        {
            paths["sft"]: sft,
            paths["rl_train"]: (rl_row(a, b, i) for i, (a, b) in enumerate(train)),
            paths["rl_test"]: (rl_row(a, b, i, "test") for i, (a, b) in enumerate(test)),
        }
    )
    return paths
