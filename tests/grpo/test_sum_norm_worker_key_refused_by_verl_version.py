"""verl's trainer.use_legacy_worker_impl beside loss_agg_mode=seq-mean-token-sum-norm is
refused, naming both verl behaviours and the setting for each.

verl's `agg_loss` took that mode's mean over sequences only from b8d91ef8d (2026-02-26):
its legacy actor (`auto`, `enable`) trained `micro_batch`'s loss before it and `global`'s
after, 16 times apart at 16 responses a micro-batch, and a config does not say which verl
wrote it. The conversion mapped `auto` to `micro_batch` without a word.
"""

from __future__ import annotations

import pytest
import torch

from trainer.grpo.aggregation import LossScale, aggregate
from trainer.verl_import import convert_verl

SUM_NORM = "seq-mean-token-sum-norm"
WIDTH = 8  # L, the max response length


def converted(tmp_path, *keys: str):
    script = tmp_path / "run.sh"
    words = ["python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo", *keys]
    script.write_text(" \\\n    ".join(words) + "\n")
    return convert_verl(script)


@pytest.mark.parametrize("worker", ["auto", "enable", "disable"])
def test_the_worker_key_beside_sum_norm_is_refused_naming_both_verls(tmp_path, worker):
    conversion = converted(
        tmp_path,
        f"trainer.use_legacy_worker_impl={worker}",
        f"actor_rollout_ref.actor.loss_agg_mode={SUM_NORM}",
    )
    assert "loss_normalization" not in conversion.tree["actor"]
    assert conversion.tree["actor"]["loss_agg_mode"] == SUM_NORM
    (line,) = [item for item in conversion.dropped if "use_legacy_worker_impl" in item]
    assert line.startswith(f"trainer.use_legacy_worker_impl={worker}: ")
    for said in ("b8d91ef8d", "2026-02-26", f"loss_agg_mode={SUM_NORM}"):
        assert said in line
    assert "actor.loss_normalization=global" in line
    assert ("actor.loss_normalization=micro_batch" in line) == (worker != "disable")
    assert "\n" not in line


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_other_modes_keep_the_workers_normalization(tmp_path, mode):
    conversion = converted(
        tmp_path,
        "trainer.use_legacy_worker_impl=auto",
        f"actor_rollout_ref.actor.loss_agg_mode={mode}",
    )
    assert conversion.tree["actor"]["loss_normalization"] == "micro_batch"
    assert not [item for item in conversion.dropped if "use_legacy_worker_impl" in item]


def micro_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two micro-batches of 2 responses each, of unequal lengths, positive token losses."""
    generator = torch.Generator().manual_seed(0)
    out = []
    for lengths in ([8, 3], [5, 1]):
        mask = torch.zeros(len(lengths), WIDTH)
        for row, length in enumerate(lengths):
            mask[row, :length] = 1
        out.append((torch.rand(len(lengths), WIDTH, generator=generator), mask))
    return out


def mini_batch_loss(normalization: str) -> float:
    batches = micro_batches()
    scale = LossScale.of(
        [mask for _, mask in batches],
        norm_length=WIDTH,
        distributed=False,
        per_micro_batch=normalization == "micro_batch",
    )
    return sum(float(aggregate(loss, mask, SUM_NORM, scale)) for loss, mask in batches)


def verls_legacy_actor(sequence_mean: bool) -> float:
    """dp_actor's loss: `agg_loss` of each micro-batch alone, times 1 / gradient accumulation;
    agg_loss's sum-norm divided by the micro-batch's sequence count from b8d91ef8d on."""
    batches = micro_batches()
    total = 0.0
    for loss, mask in batches:
        own = float((loss * mask).sum()) / WIDTH
        if sequence_mean:
            own /= float((mask.sum(-1) > 0).sum())
        total += own / len(batches)
    return total


def test_each_verl_is_the_setting_the_refusal_names():
    assert mini_batch_loss("micro_batch") == pytest.approx(verls_legacy_actor(False))
    assert mini_batch_loss("global") == pytest.approx(verls_legacy_actor(True))
    assert verls_legacy_actor(False) == pytest.approx(2 * verls_legacy_actor(True))
