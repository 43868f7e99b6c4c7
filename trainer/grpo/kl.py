"""Per-token KL estimators between the policy and the frozen reference (Schulman's k1/k2/k3).

For sampled tokens, with d = log pi(t) - log ref(t):
  k1 ("kl")            d                  unbiased, high variance, can be negative
  abs                  |d|
  k2 ("mse")           d^2 / 2            low variance, biased
  k3 ("low_var_kl")    exp(-d) + d - 1    unbiased and always >= 0; verl clamps -d to [-20, 20]
                                          and the estimate to [-10, 10] so one outlier token
                                          cannot blow up the loss

Each name with a trailing `+` (`k3+`, `low_var_kl+`, `k1+`, `abs+`, ...) is verl's
straight-through form (verl-project/verl 1dda039 `kl_penalty`): the value of the named
estimator with the gradient of k2. k1's and k3's expected values are the KL, but their
expected gradients are not its gradient; k2's gradient (d times the log-prob's) is, so the
`+` form logs and weighs the named estimate while it trains on k2's gradient. `k2+` and
`mse+` are k2 itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:  # torch is imported where it is used: grpo/config.py reads the names below
    import torch

# The one list: config validation reads the Literal, `kl_penalty` the tuples
KlLossType = Literal[
    "k1",
    "kl",
    "abs",
    "k2",
    "mse",
    "k3",
    "low_var_kl",
    "k1+",
    "kl+",
    "abs+",
    "k2+",
    "mse+",
    "k3+",
    "low_var_kl+",
]
KL_TYPES: tuple[KlLossType, ...] = get_args(KlLossType)
STRAIGHT_THROUGH = "+"  # the suffix of verl's straight-through forms


def kl_penalty(
    log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    kl_type: str = "low_var_kl",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL estimate of the policy from the reference (same shape as the inputs);
    a `+` type: the named estimate's value, k2's gradient (module docstring). 0 off `mask`,
    where the inputs are taken out before the estimate is formed (`masking`: a NaN or -inf
    reference log-prob there reaches no gradient)."""
    from trainer.grpo.masking import off_mask_zeroed

    if kl_type not in KL_TYPES:
        raise ValueError(f"kl_loss_type {kl_type!r} is not one of {', '.join(KL_TYPES)}")
    log_prob, ref_log_prob = off_mask_zeroed(mask, log_prob, ref_log_prob)
    base = kl_type.removesuffix(STRAIGHT_THROUGH)
    value = _estimate(log_prob, ref_log_prob, base)
    if base == kl_type or base in ("k2", "mse"):
        return value
    k2 = _estimate(log_prob, ref_log_prob, "k2")
    return k2 - k2.detach() + value.detach()


def _estimate(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_type: str) -> torch.Tensor:
    """The estimator `kl_type` (no `+`), its value and gradient both its own."""
    import torch

    diff = log_prob - ref_log_prob
    if kl_type in ("k1", "kl"):
        return diff
    if kl_type == "abs":
        return diff.abs()
    if kl_type in ("k2", "mse"):
        return 0.5 * diff.square()
    log_ratio = torch.clamp(-diff, min=-20.0, max=20.0)  # k3, low_var_kl
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1.0, min=-10.0, max=10.0)
