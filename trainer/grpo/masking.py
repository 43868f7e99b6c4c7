"""Positions off the response mask taken out of a loss's inputs, before any term is formed.

Past a response's end the batch holds whatever it was padded with: an advantage that is NaN
or inf (a NaN reward broadcast over the row), a reference log-prob of NaN or -inf.
`aggregate` keeps such a position out of the loss's value (`where`, not a product with 0),
but a gradient is the product of each op's local derivative, and 0 times a NaN derivative
is NaN: the step's loss was finite while the weights' gradient was NaN, and the run stopped
on its norm. So the inputs themselves are replaced there, by 0, whose every derivative is
finite: what is masked out never reaches a gradient.
"""

from __future__ import annotations

import torch


def off_mask_zeroed(mask: torch.Tensor | None, *values: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """`values` with 0 at the positions where `mask` is 0 (`where`, whose gradient there is
    0 whatever the value held); `values` as given where `mask` is None (every position kept)."""
    if mask is None:
        return values
    keep = mask.bool()
    return tuple(value.where(keep, 0.0) for value in values)
