"""Exact transforms of Megatron-core's fused tensors: QKV, SwiGLU gate/up, padded vocabulary.

Megatron-core keeps some weights that Hugging Face holds apart as one tensor: q, k and v
interleaved per query group in linear_qkv, gate and up stacked (per tensor-parallel rank)
in a SwiGLU linear_fc1, and the vocabulary padded to a multiple in the embedding and
output layer. Splitting and merging them depends only on the model's numbers
(`Geometry`), not on which name holds them, so these functions live apart from the name
tables (`name_maps`) that say which tensor takes which transform. A conversion wrong by one
row permutation still loads and produces garbage: each transform checks the shapes it is
given against the geometry before a byte is read, and each has an exact inverse that the
tests hold it to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mfsdp_ckpt.convert.mapping_errors import MappingError, ShapeError, StoredShapeError
from mfsdp_ckpt.convert.vocab_padding import RecordedPadding, check_vocab_rows

if TYPE_CHECKING:  # the transforms get tensors from their caller; planning needs no torch
    import torch
    from transformers import PretrainedConfig

    from mfsdp_ckpt.convert.export_source import JsonConfig


@dataclass(frozen=True)
class GateUpOrder:
    """Where a fused SwiGLU linear_fc1 keeps its gate and up rows. Megatron-core's fc1 is a
    column-parallel linear whose rows each tensor-parallel rank holds as its own
    [gate_r; up_r]: a save that gathers the tensor as one (torch_dist's
    apply_swiglu_sharded_factory) writes [gate; up], one that keeps the ranks' pieces
    in rank order (a Megatron-FSDP DTensor, fsdp_dtensor without its SwiGLU split) writes
    [gate_0; up_0; gate_1; up_1; ...]. `ranks` is how many such pieces there are (1: [gate;
    up]); `unknown` says why the checkpoint's record proves neither (`recorded_layout`:
    "a fused linear_fc1 ... is not known"), and the tensor is then refused rather than
    split by a guess. A LoRA adapter's B on fc1 holds its rows the same way."""

    ranks: int = 1
    unknown: str | None = None


@dataclass(frozen=True)
class Geometry:
    """The numbers the fused mcore tensors are laid out by: the config's, and what the
    checkpoint's record says of how they were saved (`recorded_layout`)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool
    vocab_size: int | None = None  # None: rows of the vocabulary tensors are not checked
    vocab_padding: RecordedPadding | None = None  # None: no padding rule recorded
    gate_up: GateUpOrder = GateUpOrder()  # a dense layer's (and a shared expert's) fc1
    expert_gate_up: GateUpOrder = GateUpOrder()  # a routed expert's fc1

    def __post_init__(self) -> None:
        """Numbers the splits divide by: a zero or negative one would crash or mis-slice."""
        for name in ("num_heads", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not is_int(value) or value <= 0:
                raise MappingError(f"config: {name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise MappingError(
                f"config: {self.num_heads} attention heads do not split into"
                f" {self.num_kv_heads} KV heads"
            )

    @classmethod
    def from_config(cls, config: JsonConfig | PretrainedConfig) -> Geometry:
        """From any config transformers reads: one that lacks a number (a vision-language
        config keeps them in a sub-config) is a MappingError naming it, not an AttributeError."""
        num_heads: Any = getattr(config, "num_attention_heads", None)
        if not is_int(num_heads) or num_heads <= 0:
            raise MappingError(
                f"config: num_attention_heads must be a positive integer, got {num_heads!r}"
            )
        hidden: Any = getattr(config, "hidden_size", None)
        vocab: Any = getattr(config, "vocab_size", None)
        head_dim: Any = getattr(config, "head_dim", None) or (
            hidden // num_heads if is_int(hidden) else None
        )
        return cls(
            num_heads=num_heads,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or num_heads,
            head_dim=head_dim,
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            vocab_size=vocab if is_int(vocab) and vocab > 0 else None,
        )


# ----------------------------------------------------------------- exact tensor transforms
def split_qkv(
    fused: torch.Tensor, geometry: Geometry
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Megatron's linear_qkv (weight or bias) -> HF q, k, v.

    Megatron interleaves per query group g: rows [q heads of g, k_g, v_g], each head_dim
    rows, so each TP rank owns whole groups. HF stacks all q heads, then all k, then all v.
    """
    groups, per_group = geometry.num_kv_heads, geometry.num_heads // geometry.num_kv_heads
    rest = fused.shape[1:]
    view = fused.reshape(groups, per_group + 2, geometry.head_dim, *rest)
    q = view[:, :per_group].reshape(geometry.num_heads * geometry.head_dim, *rest)
    k = view[:, per_group].reshape(groups * geometry.head_dim, *rest)
    v = view[:, per_group + 1].reshape(groups * geometry.head_dim, *rest)
    return q.contiguous(), k.contiguous(), v.contiguous()


def split_gate_up(fused: torch.Tensor, ranks: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Megatron's fused SwiGLU linear_fc1 -> HF gate_proj, up_proj: [gate_r; up_r] for each
    of `ranks` tensor-parallel pieces in order (`GateUpOrder`; 1: [gate; up])."""
    rest = fused.shape[1:]
    pieces = fused.reshape(ranks, 2, fused.shape[0] // (2 * ranks), *rest)
    gate = pieces[:, 0].reshape(fused.shape[0] // 2, *rest)
    up = pieces[:, 1].reshape(fused.shape[0] // 2, *rest)
    return gate.contiguous(), up.contiguous()


def merge_qkv(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, geometry: Geometry
) -> torch.Tensor:
    """HF q, k, v (weight or bias) -> Megatron's linear_qkv: the exact inverse of `split_qkv`
    (per query group g, rows [q heads of g, k_g, v_g], each head_dim rows)."""
    import torch

    groups, per_group = geometry.num_kv_heads, geometry.num_heads // geometry.num_kv_heads
    rest = q.shape[1:]
    q_groups = q.reshape(groups, per_group, geometry.head_dim, *rest)
    k_groups = k.reshape(groups, 1, geometry.head_dim, *rest)
    v_groups = v.reshape(groups, 1, geometry.head_dim, *rest)
    fused = torch.cat((q_groups, k_groups, v_groups), dim=1)
    return fused.reshape((geometry.num_heads + 2 * groups) * geometry.head_dim, *rest)


def qkv_merge_ranges(source_bytes: list[int], geometry: Geometry) -> list[tuple[int, int, int]]:
    """`merge_qkv` as byte ranges, in output order: (source 0/1/2 = q/k/v, offset, length).
    Whole rows move, so a merge whose dtype stays is a few file-to-file copies, no torch."""
    groups, head = geometry.num_kv_heads, geometry.head_dim
    per_group = geometry.num_heads // groups
    row = source_bytes[0] // (geometry.num_heads * head)
    ranges = []
    for group in range(groups):
        ranges.append((0, group * per_group * head * row, per_group * head * row))
        ranges.append((1, group * head * row, head * row))
        ranges.append((2, group * head * row, head * row))
    return ranges


def _qkv_shapes(shape: tuple[int, ...], g: Geometry) -> list[tuple[int, ...]]:
    rows = (g.num_heads + 2 * g.num_kv_heads) * g.head_dim
    if not shape or shape[0] != rows or g.num_heads % g.num_kv_heads:
        raise ShapeError(
            f"fused QKV has shape {shape}; the config ({g.num_heads} heads, "
            f"{g.num_kv_heads} KV heads, head_dim {g.head_dim}) needs {rows} rows"
        )
    rest = shape[1:]
    return [
        (g.num_heads * g.head_dim, *rest),
        (g.num_kv_heads * g.head_dim, *rest),
        (g.num_kv_heads * g.head_dim, *rest),
    ]


def _gate_up_shapes(shape: tuple[int, ...], order: GateUpOrder) -> list[tuple[int, ...]]:
    if order.unknown is not None:
        raise StoredShapeError(
            f"{order.unknown}; not exported (a save that splits fc1 into weight_w / weight_v"
            " exports)"
        )
    if not shape or shape[0] % (2 * order.ranks):
        pieces = f" in each of {order.ranks} tensor-parallel pieces" if order.ranks > 1 else ""
        raise StoredShapeError(f"fused gate/up has shape {shape}; dim 0 must split in two{pieces}")
    return [(shape[0] // 2, *shape[1:])] * 2


def _vocab_shapes(shape: tuple[int, ...], g: Geometry) -> list[tuple[int, ...]]:
    if not shape or g.vocab_size is None:
        return [shape]
    check_vocab_rows(shape[0], g.vocab_size, g.vocab_padding)
    return [(g.vocab_size, *shape[1:])]


def drop_vocab_padding(tensor: torch.Tensor, geometry: Geometry) -> tuple[torch.Tensor]:
    """Megatron's embedding or output layer -> HF's: the rows past the config's vocab_size
    are Megatron's padding (`vocab_padding`), which no token reaches."""
    return (tensor if geometry.vocab_size is None else tensor[: geometry.vocab_size],)


@dataclass(frozen=True)
class Transform:
    """How one stored tensor becomes its HF tensor(s): output shapes (planning) and values."""

    name: str
    shapes: Callable[[tuple[int, ...], Geometry], list[tuple[int, ...]]]
    apply: Callable[[torch.Tensor, Geometry], tuple[torch.Tensor, ...]]


COPY = Transform("copy", lambda shape, g: [shape], lambda t, g: (t,))
QKV = Transform("qkv", _qkv_shapes, split_qkv)
GATE_UP = Transform(
    "gate_up",
    lambda shape, g: _gate_up_shapes(shape, g.gate_up),
    lambda t, g: split_gate_up(t, g.gate_up.ranks),
)
# a routed expert's fc1: split by the expert tensor-parallel size it was saved with
EXPERT_GATE_UP = Transform(
    "expert_gate_up",
    lambda shape, g: _gate_up_shapes(shape, g.expert_gate_up),
    lambda t, g: split_gate_up(t, g.expert_gate_up.ranks),
)
# The first rows (a prefix of the bytes): streamed like COPY, only shorter.
VOCAB = Transform("vocab", _vocab_shapes, drop_vocab_padding)
ROW_PREFIX_TRANSFORMS = (COPY, VOCAB)


@dataclass(frozen=True)
class Merge:
    """How the HF source tensor(s) of one mcore tensor become it: shape (planning) and values."""

    name: str
    shape: Callable[[list[tuple[int, ...]], Geometry], tuple[int, ...]]
    apply: Callable[[list[torch.Tensor], Geometry], torch.Tensor]
    ranges: Callable[[list[int], Geometry], list[tuple[int, int, int]]]  # the same, as byte copies


def _merged_qkv_shape(shapes: list[tuple[int, ...]], g: Geometry) -> tuple[int, ...]:
    expected = _qkv_shapes(((g.num_heads + 2 * g.num_kv_heads) * g.head_dim, *shapes[0][1:]), g)
    if [tuple(s) for s in shapes] != expected:
        raise ShapeError(
            f"q, k, v have shapes {shapes}; the config ({g.num_heads} heads,"
            f" {g.num_kv_heads} KV heads, head_dim {g.head_dim}) needs {expected}"
        )
    return ((g.num_heads + 2 * g.num_kv_heads) * g.head_dim, *shapes[0][1:])


KEEP = Merge(
    "keep",
    lambda shapes, g: tuple(shapes[0]),
    lambda tensors, g: tensors[0],
    lambda sizes, g: [(0, 0, sizes[0])],
)


def _merge_qkv_list(tensors: list[torch.Tensor], g: Geometry) -> torch.Tensor:
    q, k, v = tensors
    return merge_qkv(q, k, v, g)


QKV_MERGE = Merge("qkv", _merged_qkv_shape, _merge_qkv_list, qkv_merge_ranges)


def is_int(value: object) -> bool:
    """A count as config.json holds one: an int of at least 0, and not a bool (JSON's
    true is an int to Python, and no count)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
