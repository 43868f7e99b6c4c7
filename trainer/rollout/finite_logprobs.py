"""A rollout whose log-probs are not finite fails its step before anything is scored or trained.

An engine returns NaN (or inf) for the tokens it sampled when its model is broken where it ran:
vLLM past the model's context (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, now refused before launch with
that engine: trainer/prerequisites.py) gave NaN and token 0 for every position past it. Such
responses were scored, trained on and the run ended exit 0, the only trace a
`rollout/actor_logprob_diff` of NaN in metrics.jsonl: the actor recomputes the log-probs it trains
with, so its loss stayed finite. A sampled token's raw log-prob is finite whenever the engine's
logits are, so one that is not says the responses are not the model's, whatever the cause.
"""

from __future__ import annotations

import torch

from mfsdp_ckpt.errors import MfsdpFailedError
from trainer.rollout.base import RolloutBatch


class NonFiniteRolloutError(MfsdpFailedError):
    """The engine's log-probs of its responses hold NaN/inf (exit 1, the run failed). A rank
    meets it alone where only its responses ran into what broke the engine."""


def check_finite_logprobs(batch: RolloutBatch, step: int, engine: str) -> None:
    """NonFiniteRolloutError naming step `step` (1-based) and the engine `engine` when a
    response token's log-prob in `batch` is NaN or inf; nothing without log-probs."""
    if batch.logprobs is None:
        return
    bad = ~torch.isfinite(batch.logprobs) & batch.response_mask.bool()
    if not bool(bad.any()):
        return
    rows = bad.any(dim=1)
    first = int(bad.int().argmax(dim=1)[rows].min())
    other = "" if engine == "hf" else ", or use rollout.name=hf (the transformers engine)"
    raise NonFiniteRolloutError(
        f"step {step}: rollout {engine} returned {int(bad.sum())} log-probs that are not finite"
        f" (NaN or inf) in {int(rows.sum())} of {len(rows)} responses, from response token"
        f" {first + 1}: its responses are not the model's, so nothing was trained on them;"
        " keep data.max_prompt_length + rollout.max_response_length within the model's context"
        f" and its weights finite{other}"
    )
