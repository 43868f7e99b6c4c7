"""The versions of the built-in reward rules, and what each changed in the scores.

The built-in rules follow verl's, and move when mfsdp follows a newer verl: the same response
then scores otherwise under the same config (the DAPO rule's box, 2026-12-06, turned a right
boxed answer's -1.0 into 1.0). A run records the version that scored each step, so a resume
across such a change can say which change meets its data (`trainer.grpo.reward_rules`). A
new change is one more entry at the end of `CHANGES`, with the data sources whose scores it
changes; `CURRENT` follows it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainer.rewards import math_dapo
from trainer.rewards.dispatch import built_in_rule


@dataclass(frozen=True)
class RuleChange:
    """The built-in rules from `version` on, which score otherwise than the version before
    them as `what` says, for the rows whose data_source `scores` accepts."""

    version: str
    what: str
    scores: Callable[[Any], bool]


def _dapo_routed(data_source: Any) -> bool:
    """Whether the DAPO rule scores a row of `data_source` (as `dispatch` routes it)."""
    return built_in_rule(data_source) is math_dapo.compute_score


# Oldest first. Before the first entry no version was recorded: a step that records none
# was scored by the rules before every change listed.
CHANGES = (
    RuleChange(
        "verl-1dda039b",
        "the DAPO rule (data_source math_dapo, math, math_dapo_reasoning, aime*) scores a"
        " response with no `Answer:` line by its last \\boxed{} in its last 100 characters"
        " (DAPO box fallback, verl bf48903d9), where it scored -1.0",
        _dapo_routed,
    ),
)
CURRENT = CHANGES[-1].version  # the version of the rules that score now


def changes_since(recorded: str | None) -> tuple[RuleChange, ...]:
    """The changes after the rules version `recorded` (None: recorded none, so every change);
    every change for a version not listed (another mfsdp's: which of them it had is not
    known)."""
    known = [change.version for change in CHANGES]
    if recorded in known:
        return CHANGES[known.index(recorded) + 1 :]
    return CHANGES
