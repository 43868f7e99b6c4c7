"""The one dtype rule for every tensor an export reads as a weight: floating point.

A base weight, a LoRA adapter's A or B (Megatron's linear_in / linear_out, PEFT's lora_A /
lora_B, mfsdp's own) stored as bool or int32 is cast to the export dtype without a word and
written or merged as if it were the weight: the export is another model, its merged weights
moved far past their own size. No trainer saves one, so such a tensor is damage, refused
naming it whatever the config or the kind of adapter: by validate (and so by resume), by
every export, and by a run that starts from a PEFT adapter dir (as a usage error naming
model.lora_adapter_path: `error`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_errors import StoredDtypeError
from mfsdp_ckpt.format.run_steps import natural_order

if TYPE_CHECKING:
    import os

    from mfsdp_ckpt.errors import MfsdpError
    from mfsdp_ckpt.format.dtypes import DType


def refuse_non_float(
    key: str,
    dtype: DType,
    what: str,
    where: str | os.PathLike | None = None,
    error: type[MfsdpError] = StoredDtypeError,
) -> None:
    """`error` `WHERE [key]: stored as DTYPE, but WHAT` when the tensor stored under `key` is
    not floating point (`what`: which weight it is, said as `X is a floating-point weight of
    Y`, `adapter_weight` for an adapter's; `where`: the checkpoint or file, when known)."""
    if not dtype.is_floating_point:
        located = f"{where} " if where is not None else ""
        raise error(f"{located}[{key}]: stored as {dtype.name}, but {what}")


def refuse_non_float_weights(
    keys: Mapping[str, str],
    dtypes: Mapping[str, DType],
    model_type: str,
    where: str | os.PathLike | None = None,
) -> None:
    """`refuse_non_float` for each weight a config requires (`keys`: {weight name: stored
    key}; `dtypes`: {stored key: dtype}), the first in name order named: export's check
    before it writes and validate's check against the config, one rule in one line."""
    for name in sorted(keys, key=natural_order):
        what = f"{name} is a floating-point weight of {model_type}"
        refuse_non_float(keys[name], dtypes[keys[name]], what, where)


MFSDP_LORA = "mfsdp LoRA"  # the kind of adapter an mfsdp LoRA step stores


def adapter_weight(kind: str) -> str:
    """`refuse_non_float`'s `what` for a tensor of a LoRA adapter of `kind` (whose: Megatron's,
    PEFT's, `MFSDP_LORA`)."""
    return f"it is a floating-point weight of the {kind} adapter"


def refuse_non_float_adapter(
    keys: Iterable[str],
    dtypes: Mapping[str, DType],
    kind: str,
    where: str | os.PathLike | None = None,
) -> None:
    """`refuse_non_float` for each stored key of a LoRA adapter (`kind`: whose, for the
    message, `adapter_weight`), the first in name order named."""
    for key in sorted(keys):
        refuse_non_float(key, dtypes[key], adapter_weight(kind), where)
