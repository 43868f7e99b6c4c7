"""The actor's micro-batch loss hands the response mask to the policy loss and the KL
estimate: a NaN advantage or a NaN / -inf reference log-prob past a response leaves the
policy's gradient finite and the same as without it, under every KL type."""

from __future__ import annotations

import pytest
import torch

from tests.grpo.test_grpo_loss_normalization import LENGTHS, WIDTH, RowLogProbs
from trainer.grpo.actor import RolloutData, UpdateStats, micro_batch_loss
from trainer.grpo.aggregation import LossScale
from trainer.grpo.config import ActorConfig
from trainer.grpo.kl import KL_TYPES


def _gradient(kl_type: str, bad: float | None) -> torch.Tensor:
    mask = torch.zeros(len(LENGTHS), WIDTH, dtype=torch.long)
    for row, length in enumerate(LENGTHS):
        mask[row, :length] = 1
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5]).unsqueeze(1).expand(-1, WIDTH).clone()
    ref = torch.full((len(LENGTHS), WIDTH), -0.3)
    if bad is not None:
        advantages = advantages.where(mask.bool(), bad)
        ref = ref.where(mask.bool(), bad)
    data = RolloutData(
        prompt_ids=torch.arange(len(LENGTHS)).unsqueeze(1),
        prompt_mask=torch.ones(len(LENGTHS), 1, dtype=torch.long),
        response_ids=torch.ones(len(LENGTHS), WIDTH, dtype=torch.long),
        response_mask=mask,
        advantages=advantages,
        old_log_probs=torch.zeros(len(LENGTHS), WIDTH),
        ref_log_probs=ref,
    )
    cfg = ActorConfig()
    cfg.use_kl_loss, cfg.kl_loss_type = True, kl_type
    model = RowLogProbs()
    rows = torch.arange(len(LENGTHS))
    scale = LossScale.local(mask)
    loss = micro_batch_loss(model, data, rows, cfg, scale, 1.0, torch.device("cpu"), UpdateStats())
    loss.backward()
    assert model.theta.grad is not None
    return model.theta.grad


@pytest.mark.parametrize("kl_type", KL_TYPES)
@pytest.mark.parametrize("bad", [float("nan"), -float("inf")])
def test_bad_values_past_the_responses_reach_no_gradient(kl_type, bad):
    grad = _gradient(kl_type, bad)
    assert torch.isfinite(grad).all(), grad
    torch.testing.assert_close(grad, _gradient(kl_type, None))
