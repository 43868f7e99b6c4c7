"""Tensor element types by name, for code that moves tensor bytes without importing torch.

Export copies a tensor that keeps its name and dtype file-to-file in the kernel: all it
needs to know of the dtype is its size, whether it is floating point and its safetensors code.
Importing torch is a start-up cost on the order of `cp`'s whole copy of a model
(bench/export_hf.py's "start-up + import torch" row, docs/benchmarks.md). So the offline path
(metadata, the reader's tables, export planning, safetensors headers) names dtypes by these records,
and only code that computes on tensor data (a cast, a QKV split, torch.load of a blob) imports
torch, through `DType.torch`.

A record prints as torch's dtype does (`torch.float32`), so messages read the same either
way. tests/ckpt/test_offline_imports.py holds the table to torch's own dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, repr=False)
class DType:
    """One torch dtype as plain data. `name` is torch's attribute name (`torch.<name>`)."""

    name: str
    itemsize: int  # bytes per element
    is_floating_point: bool
    safetensors: str | None = None  # safetensors' code; None: it has none
    storage: str | None = (
        None  # typed storage class torch.save names for it (the raw-byte path reads these)
    )

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    __str__ = __repr__

    @property
    def torch(self) -> torch.dtype:
        """The torch dtype itself; imports torch, so only for code that touches tensor data."""
        import torch

        return getattr(torch, self.name)


# The short names mfsdp's options and config keys take, by the other spellings users bring
# from torch (`torch.bfloat16`), transformers' `torch_dtype` (`bfloat16`) and verl's configs.
SHORT_NAMES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
}


def short_dtype_name(text: str) -> str:
    """`bf16` for `bfloat16`, `BF16` or `torch.bfloat16` (likewise fp16 and fp32); any other
    text lower-cased, for the caller's own check to accept or name."""
    name = text.strip().lower().removeprefix("torch.")
    return SHORT_NAMES.get(name, name)


FLOAT64 = DType("float64", 8, True, "F64", "DoubleStorage")
FLOAT32 = DType("float32", 4, True, "F32", "FloatStorage")
FLOAT16 = DType("float16", 2, True, "F16", "HalfStorage")
BFLOAT16 = DType("bfloat16", 2, True, "BF16", "BFloat16Storage")

_ALL = (
    FLOAT64,
    FLOAT32,
    FLOAT16,
    BFLOAT16,
    DType("float8_e4m3fn", 1, True, "F8_E4M3"),
    DType("float8_e5m2", 1, True, "F8_E5M2"),
    DType("float8_e4m3fnuz", 1, True),
    DType("float8_e5m2fnuz", 1, True),
    DType("float8_e8m0fnu", 1, True),
    DType("float4_e2m1fn_x2", 1, True),
    DType("int64", 8, False, "I64", "LongStorage"),
    DType("int32", 4, False, "I32", "IntStorage"),
    DType("int16", 2, False, "I16", "ShortStorage"),
    DType("int8", 1, False, "I8", "CharStorage"),
    DType("uint8", 1, False, "U8", "ByteStorage"),
    DType("bool", 1, False, "BOOL", "BoolStorage"),
    DType("uint16", 2, False),
    DType("uint32", 4, False),
    DType("uint64", 8, False),
    DType("complex32", 4, False),
    DType("complex64", 8, False),
    DType("complex128", 16, False),
    DType("qint8", 1, False),
    DType("quint8", 1, False),
    DType("qint32", 4, False),
    DType("quint4x2", 1, False),
    DType("quint2x4", 1, False),
    DType("bits8", 1, False),
    DType("bits16", 2, False),
    DType("bits1x8", 1, False),
    DType("bits2x4", 1, False),
    DType("bits4x2", 1, False),
    *(
        DType(f"{kind}{bits}", 1, False) for kind in ("int", "uint") for bits in range(1, 8)
    ),  # sub-byte ints
)
# torch's other names for the same dtypes (`torch.float` is torch.float32, ...)
_ALIASES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "chalf": "complex32",
    "bit": "uint1",
}

_CANONICAL = {d.name: d for d in _ALL}
BY_NAME: dict[str, DType] = _CANONICAL | {
    alias: _CANONICAL[name] for alias, name in _ALIASES.items()
}
BY_STORAGE: dict[str, DType] = {d.storage: d for d in _ALL if d.storage}

__all__ = ["BFLOAT16", "BY_NAME", "BY_STORAGE", "FLOAT16", "FLOAT32", "FLOAT64", "DType"]
