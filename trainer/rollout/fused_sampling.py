"""The per-step token choice and its log-prob in one pass over the logits, for the decode loop.

After each decode step the engine picks a token per row and, for GRPO, that token's log-prob.
Eagerly that is some ten passes over the (rows, vocab) logits (an fp32 copy, the temperature
scale, the noise's clamp and log, the subtraction, argmax, then gather and logsumexp for the
log-prob), each a full read or write of a tensor that at 256 rows and a 152k vocabulary
is 155 MB. `pick_kernel` reads the logits and the noise once, and a compacted batch's rows
read their share of the noise in place (no gathered copy). `greedy_pick` and `gumbel_pick`
say in torch what it computes; they are the fallback where the kernel cannot run.

The logits may come in the model's dtype (the decode graph then skips its fp32 copy): they
are upcast inside, so the log-prob is the fp32 log-softmax either way, as the eager path
computes it, and the GRPO actor is compared against it. The random noise is drawn outside
exactly as `sample_next` draws it, so a seed gives the same tokens on either path. Top-k and
top-p need a sort or a top-k per row and stay on the eager path.
"""

from __future__ import annotations

import warnings

import torch

from trainer.rollout.base import SamplingParams
from trainer.rollout.sampling import chosen_logprob, sample_next


def greedy_pick(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, vocab) logits -> the most likely token per row and its log-prob."""
    chosen = logits.argmax(dim=-1)
    return chosen, chosen_logprob(logits, chosen)


def gumbel_pick(
    logits: torch.Tensor, noise: torch.Tensor, temperature: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample_next`'s Gumbel-max race on temperature-scaled logits with its Exp(1) `noise`
    (these rows' share of the batch's draw), without its in-place steps, and the chosen
    token's log-prob under the unscaled logits, as the engine reports. `temperature` is a
    0-d tensor, as `pick_kernel` takes it."""
    scores = logits.float() / temperature
    chosen = (scores - noise.clamp(min=torch.finfo(noise.dtype).tiny).log()).argmax(dim=-1)
    return chosen, chosen_logprob(logits, chosen)


def fusable(params: SamplingParams) -> bool:
    """Whether the kernel covers these parameters (no top-k / top-p filter)."""
    return params.top_k <= 0 and params.top_p >= 1.0


class TokenPicker:
    """Chooses each step's tokens and their log-probs with `pick_kernel` when `fused`, else
    eagerly.

    A kernel failure (Triton cannot compile for this GPU, or is missing) costs speed, never
    the run: the step that hit it is finished by `gumbel_pick` / `greedy_pick` on the same
    noise, and later steps take the eager path."""

    def __init__(self, fused: bool):
        self.fused = fused
        self._temperatures: dict[tuple[float, torch.device], torch.Tensor] = {}

    def __call__(
        self,
        logits: torch.Tensor,
        params: SamplingParams,
        generator: torch.Generator | None,
        rows: torch.Tensor | None,
        batch_rows: int,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(rows, vocab) logits -> (chosen tokens, their log-probs); `rows` and `batch_rows`
        as in `sample_next`. The eager path leaves the log-probs out (None) unless `params`
        asks for them; fused, they cost next to nothing and always come."""
        if not (self.fused and fusable(params)):
            chosen = sample_next(logits, params, generator, rows, batch_rows)
            return chosen, chosen_logprob(logits, chosen) if params.logprobs else None
        if params.greedy:
            return self._run(greedy_pick, logits)
        shape = (logits.shape[0] if rows is None else batch_rows, logits.shape[1])
        noise = torch.empty(shape, dtype=torch.float32, device=logits.device)
        noise.exponential_(generator=generator)
        temperature = self._temperature(params.temperature, logits.device)
        return self._run(gumbel_pick, logits, noise, temperature, rows)

    def _temperature(self, value: float, device: torch.device) -> torch.Tensor:
        """`value` as a 0-d fp32 tensor on `device`, made once per value (a copy to the
        device every step would cost a transfer)."""
        key = (value, device)
        if key not in self._temperatures:
            self._temperatures[key] = torch.tensor(value, dtype=torch.float32, device=device)
        return self._temperatures[key]

    def _run(
        self,
        reference,
        logits: torch.Tensor,
        noise: torch.Tensor | None = None,
        temperature: torch.Tensor | None = None,
        rows: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The kernel's pick, or `reference`'s (greedy_pick / gumbel_pick) where it fails."""
        if self.fused:
            try:
                from trainer.rollout import pick_kernel  # Triton: imported where it is used

                return pick_kernel.pick(logits, noise, temperature, noise_rows=rows)
            except Exception as err:  # any kernel failure costs speed, not the run
                warnings.warn(
                    f"rollout: the token-pick kernel failed, sampling eagerly ({err})",
                    stacklevel=2,
                )
                self.fused = False
        if noise is None:
            return reference(logits)
        return reference(logits, noise if rows is None else noise[rows], temperature)
