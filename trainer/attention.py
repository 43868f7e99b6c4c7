"""Variable-length attention for packed rows (`model.attn_implementation=varlen`).

A packed row holds several documents end to end. SDPA can only be told so with a
block-diagonal mask over the whole row, and SDPA with an explicit mask runs a kernel that
visits every query-key pair of the row. `torch.nn.attention.varlen.varlen_attn` (flash
attention over `cu_seqlens`, torch >= 2.10 on CUDA) visits only the pairs inside each
document. The packing passes the documents' boundaries as `cu_seqlens` (int32, [docs + 1]);
they travel through the model's forward kwargs to every attention call.

A sliding-attention layer (Qwen2/Qwen3 `layer_types`) passes its `sliding_window`, which
becomes the kernel's window: dropped, the layer trained with full attention, another model
than the one exported and rolled out. A keyword the kernel cannot apply (`UNHONOURED`) is
refused in one line rather than dropped.

Everything else stays SDPA, mask included: rows without `cu_seqlens` (padded batches,
generation), and every call on CPU, where the block mask transformers builds from the
restarting position ids keeps the same numerics.

Registered with transformers under `varlen` at import: a name must be registered before a
model is built with it, and both registries are process-wide.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "varlen"
# keywords a transformers attention module may pass that change what it computes and that
# varlen_attn has no argument for (a logit cap, attention sinks, a position bias, a paged cache)
UNHONOURED = ("softcap", "s_aux", "position_bias", "cache")


def flash_window(sliding_window: int | None) -> tuple[int, int]:
    """varlen_attn's (left, right) window for a layer's transformers `sliding_window`:
    transformers keeps key k for query q where q - k < sliding_window
    (`masking_utils.sliding_window_overlay`), the kernel where q - left <= k <= q + right;
    right 0 is causal, left -1 unbounded."""
    return (-1, 0) if sliding_window is None else (sliding_window - 1, 0)


def varlen_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seqlens: torch.Tensor | None = None,
    sliding_window: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: query [batch, heads, seq, dim] in, [batch, seq, heads,
    dim] out. Packed rows on CUDA go through `varlen_attn`; the rest through SDPA."""
    if cu_seqlens is None or not query.is_cuda or dropout:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )  # the mask transformers built holds the sliding window
    unhonoured = [name for name in UNHONOURED if kwargs.get(name) is not None]
    causal = kwargs.get("is_causal")  # as SDPA reads it: the module's where not passed
    if not (getattr(module, "is_causal", True) if causal is None else causal):
        unhonoured.append("is_causal=False")
    if unhonoured:
        raise ValueError(
            f"model.attn_implementation=varlen: {type(module).__name__} passes"
            f" {', '.join(unhonoured)}, which varlen_attn cannot apply; set"
            " model.attn_implementation=sdpa"
        )
    from torch.nn.attention.varlen import varlen_attn

    if query.shape[0] != 1:
        raise ValueError(
            f"varlen attention: a packed micro-batch is one row, got {query.shape[0]} rows"
        )
    groups = query.shape[1] // key.shape[1]
    # [1, heads, seq, dim] -> [seq, heads, dim]; torch 2.11's varlen_attn has no GQA option,
    # so each key/value head is repeated for its group of query heads.
    q = query[0].transpose(0, 1)
    k = key[0].repeat_interleave(groups, dim=0).transpose(0, 1)
    v = value[0].repeat_interleave(groups, dim=0).transpose(0, 1)
    # The row length bounds every document's: an exact maximum would cost a device-to-host
    # sync per call, and a new integer per micro-batch would recompile compiled layers.
    longest = query.shape[2]
    # without return_aux, varlen_attn returns the output alone (its annotation has no overload)
    out = cast(
        torch.Tensor,
        varlen_attn(
            q,
            k,
            v,
            cu_seqlens,
            cu_seqlens,
            longest,
            longest,
            scale=scaling,
            window_size=flash_window(sliding_window),
        ),
    )
    return out.unsqueeze(0), None


AttentionInterface.register(NAME, varlen_attention_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)
