"""import-hf's `--dtype` cast: a source tensor read a window at a time into the tensor to write.

Read whole and then cast, a source tensor and its cast were held at once (1.5x the largest
fp32 tensor cast to bf16, 3x a bf16 one's stored size cast to fp32). Here the tensor to write
is made once, in the output dtype, and filled window by window from the source's bytes, so a
cast holds that tensor and one window, whichever way it casts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource

# Source bytes read (and cast) at a time: validate --deep's window, small beside any tensor
# worth streaming, large enough that the reads cost nothing next to the cast
CAST_WINDOW_BYTES = 16 << 20

CastProgress = Callable[[int], None]  # bytes more of the output tensor cast


def read_cast(
    source: SafetensorsSource,
    name: str,
    dtype: torch.dtype,
    on_window: CastProgress | None = None,
) -> torch.Tensor:
    """Stored tensor `name` as a new tensor of `dtype` and its shape, read and cast a window
    at a time; `on_window(nbytes)` hears each window's output bytes as they are cast."""
    import torch

    entry = source.tensors[name]
    out = torch.empty(entry.shape, dtype=dtype)
    flat, itemsize = out.reshape(-1), entry.dtype.itemsize
    per_window = max(1, CAST_WINDOW_BYTES // itemsize)
    window = torch.empty(min(per_window, entry.numel), dtype=entry.dtype.torch)
    window_bytes = window.view(torch.uint8).numpy().data
    for start in range(0, entry.numel, per_window):
        count = min(per_window, entry.numel - start)
        source.read_into(entry, window_bytes[: count * itemsize], start * itemsize)
        flat[start : start + count].copy_(window[:count])
        if on_window is not None:
            on_window(count * out.element_size())
    return out
