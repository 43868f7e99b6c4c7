"""Score a batch of responses: each row's `data_source` picks the rule, or one custom function
scores everything.

A score function may return a float or a dict with a "score" key (verl's convention, which lets
it report extra values such as "acc"); `accuracy` is "acc" when given, else score > 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainer.rewards import gsm8k, math
from trainer.rewards.custom import RewardError, load_reward_function

GSM8K_SOURCES = ("openai/gsm8k", "gsm8k")
MATH_SOURCES = (
    "lighteval/MATH",
    "DigitalLearningGmbH/MATH-lighteval",
    "HuggingFaceH4/MATH-500",
    "math",
    "math_dapo",
)


def default_compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None
) -> float:
    """The built-in rule for a data source (verl's `default_compute_score` for these sources)."""
    if data_source in GSM8K_SOURCES:
        return gsm8k.compute_score(solution_str, ground_truth)
    if data_source in MATH_SOURCES:
        return math.compute_score(solution_str, ground_truth)
    known = ", ".join(GSM8K_SOURCES + MATH_SOURCES)
    raise RewardError(
        f"no built-in reward for data_source {data_source!r} (known: {known}); set reward.path "
        "and reward.name"
    )


@dataclass
class Scores:
    rewards: list[float]
    accuracy: list[float]


class RewardScorer:
    """Scores decoded responses row by row with the built-in rules or a custom function."""

    def __init__(self, path: str | None = None, name: str = "compute_score"):
        self.function: Callable = (
            load_reward_function(path, name) if path else default_compute_score
        )

    def __call__(
        self,
        data_sources: Sequence[str],
        responses: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[Any] | None = None,
    ) -> Scores:
        extra_infos = extra_infos if extra_infos is not None else [None] * len(responses)
        rewards, accuracy = [], []
        for source, response, truth, extra in zip(
            data_sources, responses, ground_truths, extra_infos, strict=True
        ):
            result = self.function(
                data_source=source, solution_str=response, ground_truth=truth, extra_info=extra
            )
            if isinstance(result, dict):
                if "score" not in result:
                    raise RewardError(
                        "reward function returned a dict without 'score' for data_source "
                        f"{source!r}"
                    )
                reward = float(result["score"])
                accuracy.append(float(result.get("acc", reward > 0)))
            else:
                reward = float(result)
                accuracy.append(float(reward > 0))
            rewards.append(reward)
        return Scores(rewards=rewards, accuracy=accuracy)
