"""Linear layers that read the same input, run as one matmul over one weight buffer.

In a decode step a layer's q, k and v projections (and its gate and up projections) each
read the same hidden states; at a few hundred rows k and v are small matmuls whose launch
and tail cost more than their bytes. One matmul over the concatenated weights does the same
work in one pass. The concatenated buffer is not a copy: the modules' own parameters are
made views into it, so `update_weights`, which copies into those parameters in place, updates
the fused weights too, and transformers' forward over the same modules is unchanged.
Something that swaps a parameter's tensor later (`model.to`, `load_state_dict(assign=True)`)
breaks the sharing; `intact` notices, and the decoder fuses again. Engines over the same
model share its fused buffers (`of`), so they do not take the parameters from each other.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

_FUSED: weakref.WeakKeyDictionary[torch.nn.Module, FusedLinear] = weakref.WeakKeyDictionary()


class FusedLinear:
    """`linears` (same input size, dtype and device, all with a bias or none) as one matmul."""

    def __init__(self, linears: list[torch.nn.Linear]):
        self.linears = linears
        self.sizes = [linear.out_features for linear in linears]
        with torch.inference_mode(False), torch.no_grad():
            self.weight = torch.cat([linear.weight.detach() for linear in linears])
            for linear, part in zip(linears, self.weight.split(self.sizes)):
                linear.weight.data = part
            self.bias = None
            if linears[0].bias is not None:
                self.bias = torch.cat([linear.bias.detach() for linear in linears])
                for linear, part in zip(linears, self.bias.split(self.sizes)):
                    linear.bias.data = part

    @classmethod
    def of(cls, linears: list[torch.nn.Linear]) -> FusedLinear | None:
        """The modules' fused form (made once, while intact), or None where they do not fit."""
        if not cls.fits(linears):
            return None
        fused = _FUSED.get(linears[0])
        if fused is None or fused.linears != linears or not fused.intact():
            fused = _FUSED[linears[0]] = cls(linears)
        return fused

    @staticmethod
    def fits(linears: list[torch.nn.Linear]) -> bool:
        first = linears[0]
        return all(
            type(linear) is torch.nn.Linear
            and linear.in_features == first.in_features
            and linear.weight.dtype == first.weight.dtype
            and linear.weight.device == first.weight.device
            and (linear.bias is None) == (first.bias is None)
            for linear in linears
        )

    def intact(self) -> bool:
        """Whether every module's parameters are still views into the fused buffers."""
        pairs = [(self.weight, [linear.weight for linear in self.linears])]
        if self.bias is not None:
            pairs.append((self.bias, [linear.bias for linear in self.linears]))
        for buffer, params in pairs:
            for param, part in zip(params, buffer.split(self.sizes)):
                if param.data_ptr() != part.data_ptr() or param.shape != part.shape:
                    return False
        return True

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each module's output, as views into one matmul's result."""
        return F.linear(x, self.weight, self.bias).split(self.sizes, dim=-1)
