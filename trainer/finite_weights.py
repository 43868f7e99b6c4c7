"""A model dir whose weights hold NaN/Inf is refused before the first step, naming the tensor.

Such weights (a diverged run's save) trained to "step 1: gradient norm is nan", which
blamed the step and left a run dir behind; import-hf refuses the same files naming the
file and tensor. The check runs on the parameters as loaded, in memory where they already
are (on the run's device), so the files are not read a second time; the loaded values are
what training would start from (a cast to fp32 keeps every NaN/Inf). Each parameter is
summed first: a sum is finite only when every value is (NaN and Inf carry through it), and
on a CPU it took a tenth of the time `isfinite` did, which made the check a minute for a
model of billions of parameters. Values are counted only for a sum that is not finite
(`count_nonfinite_tensor`, as import-hf counts them; finite values whose sum overflows
count 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format.finite import count_nonfinite_tensor

if TYPE_CHECKING:  # torch loads in the ranks, not where this module is imported for checks
    import torch

    from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource


class NonFiniteWeightsError(MfsdpFailedError, ValueError):
    """A weight of the model dir holds NaN/Inf (exit 1, as import-hf's refusal)."""

    every_rank = True  # every rank reads the same files: rank 0 says it, once


def refuse_nonfinite_weights(model: torch.nn.Module, files: SafetensorsSource) -> None:
    """NonFiniteWeightsError naming the file and tensor of the first parameter of `model`
    (loaded from `files`) that holds NaN/Inf. A tied weight is counted once."""
    for name, parameter in model.named_parameters():
        values = parameter.detach()
        if not values.is_floating_point() or bool(values.sum().isfinite()):
            continue
        found = count_nonfinite_tensor(values)
        if found:
            raise NonFiniteWeightsError(
                f"{_file_of(files, name)} [{name}]: holds {found} NaN/Inf value(s) (a diverged"
                " run?); training from it would only give NaN"
            )


def _file_of(files: SafetensorsSource, name: str) -> Path:
    """The safetensors file `name` was loaded from; the model dir for a name the files do
    not hold as such."""
    entry = files.tensors.get(name)
    return files.root / entry.file if entry is not None else files.root
