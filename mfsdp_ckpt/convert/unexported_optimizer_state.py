"""What an export says of the optimizer state a checkpoint holds beside its weights.

An export writes the model weights only. Two kinds of optimizer state bear on what a user
gets, and each gets one line: Megatron's dp_reshardable flat buffers, which Megatron-LM's
inspector files under the model entry (`megatron_flat_optimizer`), are left out, not taken
for weights; and a bf16/fp16 run's fp32 main weights, which Megatron's optimizer keeps as
the `param` state (`MAIN_PARAM_STATES`): `--dtype fp32` upcasts the half-precision model
weights (what Megatron-LM itself serves), so the master precision in the save is not what
is written.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from mfsdp_ckpt.format import megatron_flat_optimizer, state_keys
from mfsdp_ckpt.format.dtypes import FLOAT32, DType

# The fp32 main weight as Megatron's optimizers name the state: its distributed optimizer's
# `param` (fully_reshardable, dp_reshardable) or `fp32_param` (fully_sharded_model_space),
# its precision-aware optimizer's `master_param`
MAIN_PARAM_STATES = ("param", "fp32_param", "master_param")


def flat_buffers_note(keys: Collection[str]) -> str | None:
    """The line for the dp_reshardable flat buffers among `keys` the export left out, or
    None where there are none."""
    flat = [key for key in keys if megatron_flat_optimizer.is_flat_bucket(key)]
    if not flat:
        return None
    return (
        f"left out {len(flat)} tensor(s) of Megatron's dp_reshardable optimizer state"
        f" ([{flat[0]}]): flat per-bucket buffers, not model weights"
    )


def main_params_note(
    dtypes: Mapping[str, DType], out_dtype: DType, stored: Collection[DType]
) -> str | None:
    """The line for an fp32 export of half-precision model weights from a checkpoint whose
    optimizer keeps fp32 main weights (`<param>.param` and the like, per parameter or in
    flat buffers), or None. `dtypes`: every stored tensor's dtype by key; `stored`: the
    dtypes of the weights written."""
    half = sorted({d.name for d in stored if d.is_floating_point and d.itemsize < FLOAT32.itemsize})
    if out_dtype != FLOAT32 or not half:
        return None
    roots = state_keys.state_roots(dtypes)
    main = next(
        (key for key, dtype in dtypes.items() if dtype == FLOAT32 and _is_main_param(key, roots)),
        None,
    )
    if main is None:
        return None
    return (
        f"wrote the {', '.join(half)} model weights upcast to float32; the fp32 main weights"
        f" the optimizer state holds ([{main}]) were not used"
    )


def _is_main_param(key: str, roots: state_keys.StateRoots) -> bool:
    """A per-parameter `param` state, or a dp_reshardable buffer of them."""
    rest = roots.state_path(key)
    if rest is not None:
        return rest.rpartition(".")[2] in MAIN_PARAM_STATES
    return (
        megatron_flat_optimizer.is_flat_bucket(key) and key.rpartition(".")[2] in MAIN_PARAM_STATES
    )
