"""The actor's side of a GRPO step: per-token log-probs of responses, and the policy update.

The model's `forward` is replaced (as SFT does for its loss) by one that returns the
response tokens' log-probs under softmax(logits / temperature), and their entropies: the LM
head then runs inside the module call, where FSDP2 and Megatron-FSDP hold its weight
gathered, and only response positions ever get logits.

Sequences are a left-padded prompt followed by a right-padded response; each micro-batch is
trimmed to its own longest prompt and response, with position ids counting real tokens only.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import torch

from trainer.grpo.aggregation import LossScale, aggregate, masked_mean
from trainer.grpo.config import ActorConfig
from trainer.grpo.kl import kl_penalty
from trainer.grpo.logprobs import entropy_from_logits, token_log_probs
from trainer.grpo.policy_loss import ppo_clip_loss
from trainer.model import eval_mode

ENTROPY_NONE, ENTROPY_METRIC, ENTROPY_LOSS = "none", "metric", "loss"


def attach_logprob_forward(model: torch.nn.Module) -> None:
    """`model(input_ids, attention_mask, position_ids, response_length, temperature, entropy)`
    -> (log-probs (B, R), entropies (B, R) or None) of the last R tokens."""

    def forward(
        self,
        input_ids,
        attention_mask,
        position_ids,
        response_length,
        temperature=1.0,
        entropy=ENTROPY_NONE,
    ):
        hidden = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        ).last_hidden_state
        logits = self.lm_head(hidden[:, -response_length - 1 : -1]).float()
        log_probs = token_log_probs(logits, input_ids[:, -response_length:], temperature)
        if entropy == ENTROPY_NONE:
            return log_probs, None
        if entropy == ENTROPY_METRIC:
            with torch.no_grad():
                return log_probs, entropy_from_logits(logits, temperature)
        return log_probs, entropy_from_logits(logits, temperature)

    model.forward = types.MethodType(forward, model)


@dataclass
class RolloutData:
    """One rank's rollouts for one step, row-aligned (CPU tensors)."""

    prompt_ids: torch.Tensor  # (B, P) left-padded
    prompt_mask: torch.Tensor  # (B, P)
    response_ids: torch.Tensor  # (B, R) right-padded
    response_mask: torch.Tensor  # (B, R)
    advantages: torch.Tensor | None = None  # (B, R)
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return self.response_ids.shape[0]


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), longest), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, longest - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, longest - len(prompt) :] = 1
    return ids, mask


def model_inputs(data: RolloutData, rows: torch.Tensor, device: torch.device) -> tuple[dict, int]:
    """Forward kwargs for `rows`, trimmed to their longest prompt and response; and that response
    width."""
    prompt_mask, response_mask = data.prompt_mask[rows], data.response_mask[rows]
    prompt_len = max(1, int(prompt_mask.sum(1).max()))
    response_len = max(1, int(response_mask.sum(1).max()))
    ids = torch.cat(
        [data.prompt_ids[rows, -prompt_len:], data.response_ids[rows, :response_len]], dim=1
    )
    mask = torch.cat([prompt_mask[:, -prompt_len:], response_mask[:, :response_len]], dim=1)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    inputs = dict(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        response_length=response_len,
    )
    return inputs, response_len


@torch.no_grad()
def compute_log_probs(
    model: torch.nn.Module,
    data: RolloutData,
    micro_batch: int,
    temperature: float,
    device: torch.device,
) -> torch.Tensor:
    """(B, R) log-probs of the responses, 0 off the mask; micro-batches of `micro_batch` rows.
    In eval mode (`eval_mode`: dropout off), as the rollout engine sampled them."""
    out = torch.zeros(data.response_ids.shape, dtype=torch.float32)
    with eval_mode(model):
        for start in range(0, data.rows, micro_batch):
            rows = torch.arange(start, min(data.rows, start + micro_batch))
            inputs, width = model_inputs(data, rows, device)
            log_probs, _ = model(**inputs, temperature=temperature)
            out[rows, :width] = log_probs.float().cpu() * data.response_mask[rows, :width]
    return out


@dataclass
class UpdateStats:
    """Sums over micro-batches of this rank's shares of the mini-batch's values, times the
    data-parallel size: the losses and entropy are shares of the mode's loss
    (trainer/grpo/aggregation.py); clipfrac, clipfrac_lower and ppo_kl are each micro-batch's
    own token mean over the micro-batch count, so the mini-batch's value is the mean of its
    micro-batches' (all ranks), as verl aggregates them (`Metric` MEAN in
    verl/workers/utils/losses.py), not a mean over all its tokens."""

    pg_loss: float = 0.0
    kl_loss: float = 0.0
    entropy: float = 0.0
    clipfrac: float = 0.0
    clipfrac_lower: float = 0.0
    ppo_kl: float = 0.0


def micro_batch_loss(
    model: torch.nn.Module,
    data: RolloutData,
    rows: torch.Tensor,
    cfg: ActorConfig,
    scale: LossScale,
    temperature: float,
    device: torch.device,
    stats: UpdateStats,
) -> torch.Tensor:
    """This micro-batch's share of the mini-batch loss (backward it), adding its metrics to
    `stats`."""
    # the runner fills these before the update (ref_log_probs where use_kl_loss)
    assert data.old_log_probs is not None and data.advantages is not None
    inputs, width = model_inputs(data, rows, device)
    mode = ENTROPY_LOSS if cfg.entropy_coeff != 0 else ENTROPY_METRIC
    log_probs, entropy = model(**inputs, temperature=temperature, entropy=mode)
    mask = data.response_mask[rows, :width].to(device)
    old = data.old_log_probs[rows, :width].to(device)
    advantages = data.advantages[rows, :width].to(device)
    terms = ppo_clip_loss(
        log_probs,
        old,
        advantages,
        cfg.clip_ratio_low,
        cfg.clip_ratio_high,
        cfg.clip_ratio_c,
        mask=mask,
    )
    agg = lambda values: aggregate(values, mask, cfg.loss_agg_mode, scale)  # noqa: E731
    pg_loss = agg(terms.loss)
    loss = pg_loss
    if cfg.use_kl_loss:
        assert data.ref_log_probs is not None
        kl_loss = agg(
            kl_penalty(
                log_probs, data.ref_log_probs[rows, :width].to(device), cfg.kl_loss_type, mask=mask
            )
        )
        loss = loss + cfg.kl_loss_coef * kl_loss
        stats.kl_loss += float(kl_loss.detach())
    entropy_loss = agg(entropy)
    if cfg.entropy_coeff != 0:
        loss = loss - cfg.entropy_coeff * entropy_loss
    with torch.no_grad():
        stats.pg_loss += float(pg_loss)
        stats.entropy += float(entropy_loss)
        # each micro-batch's own mean weighs alike, whatever its token count, as verl's
        # Metric MEAN averages them (UpdateStats)
        share = scale.dp_size / max(scale.micro_batches, 1.0)
        stats.clipfrac += float(masked_mean(terms.clipped.float(), mask)) * share
        stats.clipfrac_lower += float(masked_mean(terms.clipped_lower.float(), mask)) * share
        stats.ppo_kl += float(masked_mean(terms.neg_log_ratio, mask)) * share
    return loss
