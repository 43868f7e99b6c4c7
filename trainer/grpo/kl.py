"""Per-token KL estimators between the policy and the frozen reference (Schulman's k1/k2/k3).

For sampled tokens, with d = log pi(t) - log ref(t):
  k1 ("kl")            d                  unbiased, high variance, can be negative
  abs                  |d|
  k2 ("mse")           d^2 / 2            low variance, biased
  k3 ("low_var_kl")    exp(-d) + d - 1    unbiased and always >= 0; verl clamps -d to [-20, 20]
                                          and the estimate to [-10, 10] so one outlier token
                                          cannot blow up the loss
"""

from __future__ import annotations

import torch

KL_TYPES = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl")


def kl_penalty(
    log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_type: str = "low_var_kl"
) -> torch.Tensor:
    """Per-token KL estimate of the policy from the reference (same shape as the inputs)."""
    diff = log_prob - ref_log_prob
    if kl_type in ("k1", "kl"):
        return diff
    if kl_type == "abs":
        return diff.abs()
    if kl_type in ("k2", "mse"):
        return 0.5 * diff.square()
    if kl_type in ("k3", "low_var_kl"):
        log_ratio = torch.clamp(-diff, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(log_ratio) - log_ratio - 1.0, min=-10.0, max=10.0)
    raise ValueError(f"kl_loss_type {kl_type!r} is not one of {', '.join(KL_TYPES)}")
