"""actor/clipfrac, clipfrac_lower and ppo_kl are the mean of the micro-batches' own values,
as verl's `Metric` MEAN aggregates them (verl/workers/utils/losses.py), not weighted by their
token counts: a micro-batch of 2 tokens weighs as much as one of 12.

They were token-weighted across micro-batches (a run logged clipfrac 0.27257 where verl's
aggregation of the same micro-batches gives 0.27245), so curves did not compare exactly.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.grpo.test_grpo_loss_normalization import LENGTHS, one_update

# rows 0 and 1 (6 tokens each) at ratio e, clipped above 1.2; rows 2 and 3 (1 token) at 0.9
OLD = torch.tensor([-1.0, -1.0, math.log(1 / 0.9), math.log(1 / 0.9)])


def per_micro_batch(micro_batches: list[list[int]]) -> tuple[list[float], list[float]]:
    """Each micro-batch's own token means of the clipped share and of -log(ratio) = old."""
    clipped, kl = [], []
    for rows in micro_batches:
        tokens = sum(LENGTHS[r] for r in rows)
        clipped.append(sum(LENGTHS[r] * float(OLD[r] < math.log(1 / 1.2)) for r in rows) / tokens)
        kl.append(sum(LENGTHS[r] * float(OLD[r]) for r in rows) / tokens)
    return clipped, kl


@pytest.mark.parametrize("normalization", ["global", "micro_batch"])
def test_clip_metrics_are_the_mean_over_micro_batches(normalization):
    record, _, micro_batches = one_update(normalization, OLD)
    # the long responses share a micro-batch (the seed's shuffle): unequal token counts
    assert sorted(map(sorted, micro_batches)) == [[0, 1], [2, 3]]
    clipped, kl = per_micro_batch(micro_batches)
    assert record["actor/clipfrac"] == pytest.approx(sum(clipped) / len(clipped))
    assert record["actor/ppo_kl"] == pytest.approx(sum(kl) / len(kl))
    tokens = [sum(LENGTHS[r] for r in rows) for rows in micro_batches]
    weighted = sum(c * n for c, n in zip(clipped, tokens, strict=True)) / sum(tokens)
    assert record["actor/clipfrac"] != pytest.approx(weighted)
