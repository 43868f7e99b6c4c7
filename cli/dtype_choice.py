"""The `--dtype` option's type: mfsdp's short names, reached from torch's and HF's spellings."""

from __future__ import annotations

from typing import Any

import click

from cli.choice import Choice
from mfsdp_ckpt.format.dtypes import short_dtype_name

DTYPE_CHOICES = ["auto", "bf16", "fp16", "fp32"]


class DtypeChoice(Choice):
    """A `Choice` of `DTYPE_CHOICES` that takes `bfloat16`, `BF16`, `torch.float16`,
    `half` ... as the short name they mean: users bring these from transformers' `torch_dtype`
    and torchtitan's configs, and a refusal of `bfloat16` only sent them to --help."""

    def __init__(self) -> None:
        super().__init__(DTYPE_CHOICES)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            value = short_dtype_name(value)
        return super().convert(value, param, ctx)
