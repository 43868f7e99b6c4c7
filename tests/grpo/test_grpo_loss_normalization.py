"""GRPO's token-mean weighs tokens as the verl worker named by the run does.

verl's legacy actor (dp_actor.py, which `trainer.use_legacy_worker_impl: auto` ran) takes each
micro-batch's own token-mean and weights it 1 / (micro-batches): a short response's tokens
weigh more than a long one's when micro-batches hold unequal token counts. mfsdp normalized
over the whole mini-batch (verl's engine workers) whatever the key said, and called the key
inert. `actor.loss_normalization` now selects either, and the verl key sets it.
"""

from __future__ import annotations

import types

import pytest
import torch

from trainer.config import load_config
from trainer.distributed import DistEnv
from trainer.grpo.actor import RolloutData
from trainer.grpo.config import GRPOConfig
from trainer.grpo.runner import GRPOSteps

LENGTHS = [6, 6, 1, 1]  # 2 prompts x 2 responses, one micro-batch of each pair
WIDTH = 6


class RowLogProbs(torch.nn.Module):
    """A policy whose log-prob of every token of row i is theta[i]: the gradient on theta[i]
    is minus the weight of row i's tokens times their count (advantages 1, ratio 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.theta = torch.nn.Parameter(torch.zeros(len(LENGTHS)))
        self.micro_batches: list[list[int]] = []

    def forward(self, input_ids, attention_mask, position_ids, response_length, **_):
        rows = input_ids[:, 0]
        self.micro_batches.append(rows.tolist())
        log_probs = self.theta[rows].unsqueeze(1).expand(len(rows), response_length)
        return log_probs, torch.zeros_like(log_probs)


def policy_gradient(normalization: str) -> tuple[torch.Tensor, list[list[int]]]:
    _, grad, micro_batches = one_update(normalization)
    return grad, micro_batches


def one_update(
    normalization: str, old_log_probs: torch.Tensor | None = None
) -> tuple[dict[str, float], torch.Tensor, list[list[int]]]:
    """One update of `RowLogProbs` (theta 0) over the 4 rows, 2 micro-batches: its logged
    record, the gradient and the rows of each micro-batch. `old_log_probs` (per row; 0 by
    default) sets each row's ratio, exp(-old)."""
    cfg = GRPOConfig()
    cfg.rollout.n, cfg.rollout.max_response_length = 2, WIDTH
    cfg.data.train_batch_size = cfg.actor.ppo_mini_batch_size = 2
    cfg.actor.ppo_micro_batch_size_per_gpu = 2
    cfg.actor.use_kl_loss = False
    cfg.actor.loss_normalization = normalization
    cfg.optim.clip_grad = 0.0
    model = RowLogProbs()
    taken: list[torch.Tensor] = []
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    optimizer.step = lambda *a, **k: taken.append(model.theta.grad.clone())  # type: ignore[method-assign]
    strategy = types.SimpleNamespace(
        before_optimizer_step=lambda m: None,
        trainable_params=lambda m, o: list(m.parameters()),
        zero_grad=lambda o: o.zero_grad(),
    )
    env = DistEnv(0, 1, 0, torch.device("cpu"), False)
    steps = types.SimpleNamespace(
        cfg=cfg,
        env=env,
        run=types.SimpleNamespace(cfg=cfg, env=env, lr=lambda step: 0.0),
        actor=model,
        strategy=strategy,
        optimizer=optimizer,
    )
    mask = torch.zeros(len(LENGTHS), WIDTH, dtype=torch.long)
    for row, length in enumerate(LENGTHS):
        mask[row, :length] = 1
    data = RolloutData(
        prompt_ids=torch.arange(len(LENGTHS)).unsqueeze(1),
        prompt_mask=torch.ones(len(LENGTHS), 1, dtype=torch.long),
        response_ids=torch.ones(len(LENGTHS), WIDTH, dtype=torch.long),
        response_mask=mask,
        advantages=mask.float(),
        old_log_probs=(
            torch.zeros(len(LENGTHS), WIDTH)
            if old_log_probs is None
            else old_log_probs.unsqueeze(1).expand(len(LENGTHS), WIDTH) * mask
        ),
    )
    record = GRPOSteps.update_policy(steps, data, step=0)
    return record, taken[0], model.micro_batches


def verl_legacy_gradient(micro_batches: list[list[int]]) -> torch.Tensor:
    """dp_actor's token-mean: agg_loss over the micro-batch alone, times 1 / their count."""
    theta = torch.zeros(len(LENGTHS), requires_grad=True)
    total = torch.zeros(())
    for rows in micro_batches:
        mask = torch.tensor([[1.0] * n + [0.0] * (WIDTH - n) for n in LENGTHS])[rows]
        log_probs = theta[rows].unsqueeze(1).expand(len(rows), WIDTH)
        pg_losses = -torch.exp(log_probs - log_probs.detach())
        total = total + (pg_losses * mask).sum() / mask.sum() / len(micro_batches)
    total.backward()
    return theta.grad


def test_micro_batch_normalization_is_verls_legacy_actor_through_the_update():
    grad, micro_batches = policy_gradient("micro_batch")
    # the long responses share a micro-batch (the seed's shuffle): unequal token counts
    assert sorted(map(sorted, micro_batches)) == [[0, 1], [2, 3]]
    torch.testing.assert_close(grad, verl_legacy_gradient(micro_batches))
    torch.testing.assert_close(grad, torch.full((4,), -0.25))


def test_global_normalization_weighs_every_token_alike():
    grad, _ = policy_gradient("global")
    total = sum(LENGTHS)
    torch.testing.assert_close(grad, torch.tensor([-n / total for n in LENGTHS]))


@pytest.mark.parametrize(
    ("value", "normalization"),
    [("auto", "micro_batch"), ("enable", "micro_batch"), ("disable", "global")],
)
def test_verls_worker_key_sets_the_normalization(value, normalization):
    cfg = load_config(GRPOConfig, None, [f"trainer.use_legacy_worker_impl={value}"])
    assert cfg.actor.loss_normalization == normalization
    assert load_config(GRPOConfig).actor.loss_normalization == "global"


@pytest.mark.parametrize(("given", "normalization"), [("", None), ("auto", "micro_batch")])
def test_a_converted_script_says_which_worker_it_trains_as(tmp_path, given, normalization):
    """A verl script without the key ran the legacy actor on a verl before 63e8a0d16 and the
    engine workers after: the conversion keeps mfsdp's global and says how to get the other."""
    from trainer.verl_import import convert_verl

    words = ["python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"]
    if given:
        words.append(f"trainer.use_legacy_worker_impl={given}")
    script = tmp_path / "run.sh"
    script.write_text(" \\\n    ".join(words) + "\n")
    conversion = convert_verl(script)
    assert conversion.tree["actor"].get("loss_normalization") == normalization
    told = [note for note in conversion.notes if "use_legacy_worker_impl" in note]
    if given:
        assert told == [
            "verl's trainer.use_legacy_worker_impl is actor.loss_normalization=micro_batch here"
        ]
    else:
        assert len(told) == 1 and "actor.loss_normalization=micro_batch weighs the loss" in told[0]
