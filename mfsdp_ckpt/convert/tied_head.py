"""Whether a stored `lm_head.weight` is the embedding's copy, before a tied config drops it.

A tied transformers model holds one tensor under two names, and a trainer's state dict
saves both. Under `tie_word_embeddings: true`, export writes the embedding alone and
import-hf's mcore layout keeps no output layer (Megatron shares the embedding). That is
only right when the two hold the same values: a head trained apart (a run that untied
them, a config copied from a tied base) would be replaced by the embedding, a different
model; transformers itself refuses to tie such a pair and loads it untied. So the two are
compared byte for byte, a bounded piece at a time, and a head that differs is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from mfsdp_ckpt.format.dtypes import DType
from mfsdp_ckpt.storage.reader import CheckpointReader, Chunk, TensorEntry

if TYPE_CHECKING:
    import torch

    from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource, StoredTensor

HEAD = "lm_head.weight"
EMBEDDING = "model.embed_tokens.weight"
PIECE_BYTES = 16 << 20  # compared at a time: memory stays flat whatever the vocabulary


def untied_head(embedding: str, config: str, remedy: str) -> str:
    """What is wrong with a head that differs from `embedding`, worded as the Megatron-core
    layout refuses its own output layer under a tied config (`name_maps.map_names`)."""
    return (
        f"an output layer of its own, unequal to [{embedding}] (trained untied),"
        f" but {config} says tie_word_embeddings=true; {remedy}"
    )


def dcp_tensors_equal(reader: CheckpointReader, first: str, second: str) -> bool:
    """Whether two tensors of a DCP hold the same bytes: an alias (the same storage) without
    reading; chunk by chunk, a piece at a time, when both are sharded alike (as FSDP shards
    same-shaped weights); else read whole."""
    a, b = reader.tensors[first], reader.tensors[second]
    for entry in (a, b):  # metadata claiming more than its files hold is named as such
        reader.check_readable(entry)
    if a.shape != b.shape:
        return False
    if a.dtype != b.dtype and not (a.dtype.is_floating_point and b.dtype.is_floating_point):
        return False
    if stored_once(a, b):
        return True
    left, right = _by_offsets(a), _by_offsets(b)
    if [(c.offsets, c.sizes) for c in left] == [(c.offsets, c.sizes) for c in right]:
        return all(_chunks_equal(reader, a, x, b, y) for x, y in zip(left, right))
    whole = reader.read_tensor(first), reader.read_tensor(second)
    return _same_bits(*whole) if a.dtype == b.dtype else _other_dtype_same_values(*whole)


def stored_once(first: TensorEntry, second: TensorEntry) -> bool:
    """Two keys whose every chunk names the same bytes in the same file: an exact alias
    (import-hf stores a tied head so), equal without a read."""

    def places(entry: TensorEntry) -> list[tuple]:
        return sorted((c.offsets, c.sizes, c.file, c.file_offset, c.length) for c in entry.chunks)

    return (
        (first.shape, first.dtype) == (second.shape, second.dtype)
        and places(first) == places(second)
        and all(c.file is not None for c in first.chunks)
    )


def _by_offsets(entry: TensorEntry) -> list[Chunk]:
    """The chunks holding elements, in tensor order (empty shards of uneven FSDP say nothing)."""
    return sorted((c for c in entry.chunks if c.numel), key=lambda c: c.offsets)


def _chunks_equal(
    reader: CheckpointReader, a: TensorEntry, x: Chunk, b: TensorEntry, y: Chunk
) -> bool:
    """One chunk of each: their raw payloads compared piece by piece where DCP wrote plain
    bytes (the usual case), else the decoded chunks."""
    at, bt = reader.raw_payload_offset(a, x), reader.raw_payload_offset(b, y)
    if at is None or bt is None or x.file is None or y.file is None:
        both = reader.read_chunk(a, x), reader.read_chunk(b, y)
        return _same_bits(*both) if a.dtype == b.dtype else _other_dtype_same_values(*both)
    if a.dtype == b.dtype:
        total = x.numel * a.dtype.itemsize
        for start in range(0, total, PIECE_BYTES):
            size = min(PIECE_BYTES, total - start)
            first = reader.store.read_range(x.file, at + start, size)
            if first != reader.store.read_range(y.file, bt + start, size):
                return False
        return True
    files, offsets = (x.file, y.file), (at, bt)
    return _pieces_same_values(
        x.numel,
        (a.dtype, b.dtype),
        lambda which, start, size: reader.store.read_range(
            files[which], offsets[which] + start, size
        ),
    )


def _same_bits(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Equal bytes, so NaN equals the same NaN and -0.0 differs from 0.0."""
    import torch

    def bits(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.contiguous().reshape(-1).view(torch.uint8)

    return torch.equal(bits(first), bits(second))


def _other_dtype_same_values(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Whether two float tensors of different dtypes hold the same values: compared in
    float64 (exact for every float dtype), a bounded piece of elements at a time; NaN equals
    NaN there (a copy of a NaN is a NaN: `--allow-nonfinite` decides about those)."""
    import torch

    left, right = first.reshape(-1), second.reshape(-1)
    step = PIECE_BYTES // 8
    for i in range(0, left.numel(), step):
        x, y = (t[i : i + step].to(torch.float64) for t in (left, right))
        if not torch.equal(x.isnan(), y.isnan()) or not torch.equal(
            x.nan_to_num(0.0), y.nan_to_num(0.0)
        ):
            return False
    return True


def _pieces_same_values(
    numel: int, dtypes: tuple[DType, DType], read: Callable[[int, int, int], bytes | bytearray]
) -> bool:
    """`_other_dtype_same_values` over two stored runs of `numel` elements of `dtypes`,
    `read(which, byte start, size)` giving a piece of the first (0) or second (1): memory
    stays a piece whatever the tensor."""
    import torch

    count = max(1, PIECE_BYTES // max(d.itemsize for d in dtypes))
    for start in range(0, numel, count):
        n = min(count, numel - start)
        pieces = [
            torch.frombuffer(
                bytearray(read(which, start * dtype.itemsize, n * dtype.itemsize)),
                dtype=dtype.torch,
            )
            for which, dtype in enumerate(dtypes)
        ]
        if not _other_dtype_same_values(*pieces):
            return False
    return True


def safetensors_equal(source: SafetensorsSource, first: str, second: str) -> bool:
    """Whether two tensors of a Hugging Face model dir hold the same bytes (or, in other
    float dtypes, the same values), read a piece at a time."""
    a, b = source.tensors[first], source.tensors[second]
    if a.shape != b.shape:
        return False
    if a.dtype != b.dtype:
        if not (a.dtype.is_floating_point and b.dtype.is_floating_point):
            return False
        return _pieces_same_values(
            a.numel, (a.dtype, b.dtype), partial(_read_stored, source, (a, b))
        )
    size = min(PIECE_BYTES, a.nbytes)
    left, right = memoryview(bytearray(size)), memoryview(bytearray(size))
    for start in range(0, a.nbytes, PIECE_BYTES):
        count = min(PIECE_BYTES, a.nbytes - start)
        source.read_into(a, left[:count], start)
        source.read_into(b, right[:count], start)
        if left[:count] != right[:count]:
            return False
    return True


def _read_stored(
    source: SafetensorsSource,
    entries: tuple[StoredTensor, StoredTensor],
    which: int,
    start: int,
    size: int,
) -> bytearray:
    """`size` bytes of one of two stored tensors from byte `start` on."""
    buffer = bytearray(size)
    source.read_into(entries[which], memoryview(buffer), start)
    return buffer


__all__ = [
    "EMBEDDING",
    "HEAD",
    "PIECE_BYTES",
    "dcp_tensors_equal",
    "safetensors_equal",
    "stored_once",
    "untied_head",
]
