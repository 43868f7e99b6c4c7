"""An MoE family's experts as transformers 5.x holds them in memory, and as the hub's files
(and exports) name them.

transformers 5.x fuses a layer's experts into `mlp.experts.gate_up_proj` [E, 2I, H] (each
expert's gate rows, then its up rows) and `mlp.experts.down_proj` [E, H, I], and keeps
Mixtral's router under `mlp`; the hub's files, which every transformers version loads, hold
one tensor per expert under the family's names (`name_maps.MOE_NAMES`). A checkpoint of
the in-memory model (an HF-layout trainer save) is split into those on export and checked
as those by validate; a checkpoint's per-expert tensors are loaded back into the fused
parameters when training starts from it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.fused_tensors import COPY, Geometry, Transform
from mfsdp_ckpt.convert.hf_config import MAX_EXPERTS
from mfsdp_ckpt.convert.mapping_errors import ShapeError, StoredShapeError
from mfsdp_ckpt.convert.name_maps import MOE_NAMES, STACKED_EXPERTS_RE
from mfsdp_ckpt.storage.safetensors_source import StoredTensor

if TYPE_CHECKING:  # the transforms get tensors from their caller
    import torch


def _fused_gate_up_shapes(shape: tuple[int, ...], g: Geometry) -> list[tuple[int, ...]]:
    if len(shape) != 3 or shape[1] % 2:
        raise StoredShapeError(
            f"fused experts gate/up has shape {shape}; needs [experts, 2 x ffn, hidden]"
        )
    return [(shape[1] // 2, shape[2])] * (2 * shape[0])


def _fused_down_shapes(shape: tuple[int, ...], g: Geometry) -> list[tuple[int, ...]]:
    if len(shape) != 3:
        raise StoredShapeError(
            f"fused experts down has shape {shape}; needs [experts, hidden, ffn]"
        )
    return [tuple(shape[1:])] * shape[0]


def split_fused_gate_up(fused: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """transformers 5.x's in-memory `experts.gate_up_proj` [E, 2I, H] (each expert's gate
    rows, then its up rows) -> per expert gate, up, in expert order."""
    return tuple(half.contiguous() for expert in fused for half in expert.chunk(2, dim=0))


# One layer's experts held fused, as transformers 5.x keeps them in memory (what a trainer
# checkpoint of an MoE model stores): split into the hub files' per-expert tensors.
FUSED_EXPERTS_GATE_UP = Transform(
    "fused_experts_gate_up", _fused_gate_up_shapes, lambda t, g: split_fused_gate_up(t)
)
FUSED_EXPERTS_DOWN = Transform(
    "fused_experts_down",
    _fused_down_shapes,
    lambda t, g: tuple(expert.contiguous() for expert in t),
)


def _expert_stack_shapes(shape: tuple[int, ...], g: Geometry) -> list[tuple[int, ...]]:
    if len(shape) != 3:
        raise StoredShapeError(f"stacked experts have shape {shape}; needs [experts, rows, cols]")
    return [tuple(shape[1:])] * shape[0]


# One layer's experts stacked along dim 0, each taken whole (fc2, or fc1's gate or up half)
EXPERT_STACK = Transform(
    "expert_stack",
    _expert_stack_shapes,
    lambda t, g: tuple(expert.contiguous() for expert in t),
)


def stacked_expert_targets(
    path: str, shape: tuple[int, ...], model_type: str, key: str
) -> tuple[tuple[str, ...], Transform] | None:
    """The hub names a layer's stacked SequentialMLP experts (`name_maps.STACKED_EXPERTS_RE`,
    stored under `key`) become, and how: fc1 [E, 2F, H] as transformers 5.x's fused
    gate_up (each expert [gate; up], as torch_dist gathered it whole), its `_w` / `_v`
    halves and fc2 [E, H, F] one expert per slice. None for any other tensor, or a family
    without MOE_NAMES (refused as an unconverted expert layout). ShapeError for a stack
    claiming more than MAX_EXPERTS experts (as `fused_expert_targets`)."""
    names = MOE_NAMES.get(model_type)
    match = STACKED_EXPERTS_RE.fullmatch(path)
    if names is None or match is None:
        return None
    if shape and shape[0] > MAX_EXPERTS:
        raise StoredShapeError(
            f"[{key}]: shape {shape} claims {shape[0]} experts, more than {MAX_EXPERTS}"
        )
    experts = range(shape[0] if shape else 0)
    hf = f"model.layers.{match['layer']}.{names.block}.experts."
    kind = match["kind"]
    if kind == "linear_fc1.weight":
        parts = (names.gate, names.up)
        targets = tuple(f"{hf}{e}.{part}.weight" for e in experts for part in parts)
        return targets, FUSED_EXPERTS_GATE_UP
    part = {"linear_fc1.weight_w": names.gate, "linear_fc1.weight_v": names.up}.get(
        kind, names.down
    )
    return tuple(f"{hf}{e}.{part}.weight" for e in experts), EXPERT_STACK


# transformers 5.x's in-memory names of an MoE block (what an HF-layout trainer checkpoint
# stores): the router, and one layer's experts fused
_IN_MEMORY_MOE_RE = re.compile(
    r"(?P<layer>.+)\.mlp\.(?P<kind>gate\.weight|experts\.gate_up_proj|experts\.down_proj)"
)


def fused_expert_targets(
    name: str, shape: tuple[int, ...], model_type: str
) -> tuple[tuple[str, ...], Transform] | None:
    """The hub names a transformers 5.x in-memory MoE tensor of `model_type` becomes, and
    how: fused experts split per expert, Mixtral's router moved to its hub block; None for
    any other tensor (families without MOE_NAMES, whose fused layouts differ, keep theirs).
    ShapeError for a fused tensor claiming more than MAX_EXPERTS experts: an empty
    [10**9, 2, 0] has no bytes to contradict it, and every caller (import, validate,
    export) would make names for each claimed expert."""
    names = MOE_NAMES.get(model_type)
    match = _IN_MEMORY_MOE_RE.fullmatch(name)
    if names is None or match is None:
        return None
    if match["kind"] != "gate.weight" and shape and shape[0] > MAX_EXPERTS:
        raise StoredShapeError(
            f"[{name}]: shape {shape} claims {shape[0]} experts, more than {MAX_EXPERTS}"
        )
    block = f"{match['layer']}.{names.block}"
    if match["kind"] == "gate.weight":
        return ((f"{block}.gate.weight",), COPY) if names.block != "mlp" else None
    if len(shape) != 3:
        return None
    experts = range(shape[0])
    if match["kind"] == "experts.gate_up_proj":
        parts = (names.gate, names.up)
        targets = tuple(f"{block}.experts.{e}.{part}.weight" for e in experts for part in parts)
        return targets, FUSED_EXPERTS_GATE_UP
    targets = tuple(f"{block}.experts.{e}.{names.down}.weight" for e in experts)
    return targets, FUSED_EXPERTS_DOWN


def in_memory_slot(name: str, model_type: str) -> tuple[str, int, int, int] | None:
    """Where a hub-named MoE tensor of `model_type` lives in transformers 5.x's in-memory
    model, the inverse of `fused_expert_targets`: (parameter name, expert, part, parts),
    the tensor being part `part` of `parts` equal row blocks of `parameter[expert]`
    (gate 0 / up 1 of 2 in `experts.gate_up_proj`; down, 0 of 1, in `experts.down_proj`);
    expert -1 for a router moved back under `mlp`. None for any other name."""
    names = MOE_NAMES.get(model_type)
    if names is None:
        return None
    block = re.escape(names.block)
    match = re.fullmatch(rf"(?P<layer>.+)\.{block}\.(?P<rest>.+)", name)
    if match is None:
        return None
    layer, rest = match["layer"], match["rest"]
    if rest == "gate.weight":
        return (f"{layer}.mlp.gate.weight", -1, 0, 1) if names.block != "mlp" else None
    expert = re.fullmatch(r"experts\.(?P<e>\d+)\.(?P<part>\w+)\.weight", rest)
    if expert is None:
        return None
    index, part = int(expert["e"]), expert["part"]
    if part in (names.gate, names.up):
        return f"{layer}.mlp.experts.gate_up_proj", index, int(part == names.up), 2
    if part == names.down:
        return f"{layer}.mlp.experts.down_proj", index, 0, 1
    return None


def hub_expert_entries(
    tensors: dict[str, StoredTensor], model_type: str
) -> tuple[dict[str, StoredTensor], int]:
    """A safetensors file's tensors with fused experts (transformers 5.x's in-memory form,
    saved as it is by a trainer or `save_file(model.state_dict())`) as the per-expert hub
    tensors they hold, each a view of its bytes: every target of `fused_expert_targets`
    is the next contiguous block of rows of the fused tensor (expert 0's gate, its up,
    expert 1's gate, ...; down expert by expert), so import reads, checks and copies each
    expert on its own as if the file named it. Returns them and how many fused tensors
    were split. ShapeError for a fused tensor whose shape cannot be split or claims too
    many experts (`fused_expert_targets`)."""
    out: dict[str, StoredTensor] = {}
    split = 0
    for name, entry in tensors.items():
        fused = fused_expert_targets(name, entry.shape, model_type)
        if fused is None:
            out[name] = entry
            continue
        targets, transform = fused
        try:
            shapes = transform.shapes(entry.shape, None)  # type: ignore[arg-type]
        except ShapeError as err:
            raise type(err)(f"[{name}]: {err}") from None
        offset = entry.offset
        for target, shape in zip(targets, shapes, strict=True):
            out[target] = dataclasses.replace(entry, name=target, shape=tuple(shape), offset=offset)
            offset += out[target].nbytes
        split += transform is not COPY
    return out, split


def hub_expert_names(
    shapes: dict[str, tuple[int, ...]], model_type: str
) -> dict[str, tuple[int, ...]]:
    """A state dict's {name: shape} with fused experts (transformers 5.x in memory) under
    the per-expert names the hub's files (and an export) hold, which every transformers
    version loads; other tensors unchanged."""
    out: dict[str, tuple[int, ...]] = {}
    for name, shape in shapes.items():
        fused = fused_expert_targets(name, shape, model_type)
        if fused is None:
            out[name] = shape
            continue
        targets, transform = fused
        out.update(zip(targets, transform.shapes(shape, None)))  # type: ignore[arg-type]
    return out
