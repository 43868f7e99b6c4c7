"""What `ckpt export-hf` and `ckpt import-hf` both report: the fields that name what was
converted and the conversion's own rate, so that their --json keys and summary lines agree.

Only the leading fields live here: a dataclass puts inherited fields first, and each
command's --json keys keep its own order (`seconds` after export's `files`, before import's
`checkpoint`), so each subclass declares its `seconds` and `convert_seconds` among its own
fields; `Timed` types the shared methods that read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mfsdp_ckpt.convert.units import gb_per_s, human_bytes, took


class Timed(Protocol):
    """The timing fields every conversion result declares (see the module docstring)."""

    tensors: int
    bytes: int
    seconds: float  # the whole command's, start-up included
    convert_seconds: float | None  # reading, converting and writing the tensors; None: not apart


@dataclass
class ConversionResult:
    """What was converted, where to: the leading --json keys of both commands."""

    out_dir: str
    layout: str
    model_type: str
    dtype: str
    tensors: int
    bytes: int

    @property
    def convert_gb_per_s(self: Timed) -> float | None:
        """The tensors' own rate (None: not timed apart from the whole command)."""
        return gb_per_s(self.bytes, self.convert_seconds)

    def converted(self: Timed) -> str:
        """`12 tensors, 1.30 MiB in 0.1 s (13.0 MB/s)`: the tensors' own time and rate, or the
        whole command's where they were not timed apart."""
        seconds = self.seconds if self.convert_seconds is None else self.convert_seconds
        return f"{self.tensors} tensors, {human_bytes(self.bytes)} {took(self.bytes, seconds)}"
