"""A token id a rollout engine stops at or pads with is a row of the model's embedding.

The ids come from files (generation_config.json's eos_token_id, the tokenizer's eos and
pad), and transformers' GenerationConfig takes any integer there: an eos_token_id past
int64 was an 82-line traceback (`Overflow when unpacking long long`) at the first rollout,
after the models were built, and one in [vocab_size, 2**63) trained without a word while
the engine could never sample it. So each is checked against the model's `vocab_size` as
the engine is built, refused in one line naming the file and key (a usage error, exit 2).
"""

from __future__ import annotations

from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from trainer.config import ConfigError


def checked_token_id(value: Any, where: str, vocab_size: int) -> int:
    """`value` when it is an integer id below `vocab_size`; else ConfigError naming `where`
    (the file and key the id came from)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}: {cut_to(repr(value), 80)} is not a token id")
    if not 0 <= value < vocab_size:
        raise ConfigError(
            f"{where}: {cut_to(repr(value), 80)} is not a token id of the model (its vocab_size"
            f" {vocab_size} has ids 0 to {vocab_size - 1})"
        )
    return value
