"""Whether a stored `lm_head.weight` is the embedding's copy, before a tied config drops it.

A tied transformers model holds one tensor under two names, and a trainer's state dict
saves both. Under `tie_word_embeddings: true`, export writes the embedding alone and
import-hf's mcore layout keeps no output layer (Megatron shares the embedding). That is
only right when the two hold the same values: a head trained apart (a run that untied
them, a config copied from a tied base) would be replaced by the embedding, a different
model; transformers itself refuses to tie such a pair and loads it untied. So the two are
compared byte for byte, a bounded piece at a time, and a head that differs is refused
(Megatron-core's `output_layer.weight` beside `embedding.word_embeddings.weight` alike).

Why they differ decides what the user must do. Training a head apart moves nearly every
element of it (each row gets a gradient through the softmax), while damage (a flipped
bit, a torn sector) changes a few. So the differing elements are counted (up to a few:
past that the count stops, and the verdict with it), and a pair that differs in a few, or
whose files no longer match their manifest's digests (`tensor_digests`), is called
damaged (exit 1, pointing to `validate --deep`) instead of blaming the config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.format.dtypes import DType
from mfsdp_ckpt.storage.reader import CheckpointReader, Chunk, TensorEntry

if TYPE_CHECKING:
    import torch

    from mfsdp_ckpt.format import layout
    from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource, StoredTensor

HEAD = "lm_head.weight"
EMBEDDING = "model.embed_tokens.weight"
# The same pair under Megatron-core's names: a tied GPTModel keeps a copy of the embedding
# as the output layer of its last pipeline stage, saved with the rest.
MCORE_HEAD = "output_layer.weight"
MCORE_EMBEDDING = "embedding.word_embeddings.weight"
PIECE_BYTES = 16 << 20  # compared at a time: memory stays flat whatever the vocabulary
# "A few" differing elements: at most one in FEW_SHARE, and never fewer than MIN_FEW (a
# flipped byte is one element, a torn 4 KiB sector a thousand float32 ones of a large head),
# but always under half of them (a head of a dozen elements that differs is no "few").
FEW_SHARE, MIN_FEW = 1000, 16
DEEP_CHECK = "check its bytes with mfsdp ckpt validate --deep"


def few_elements(numel: int) -> int:
    """The most differing elements of `numel` that read as damage, not training."""
    return min(max(MIN_FEW, numel // FEW_SHARE), (numel - 1) // 2)


@dataclass(frozen=True)
class Difference:
    """How two copies differ: `differing` elements of `numel`, counted until the count
    passed `few_elements` (then a lower bound: the comparison stopped there)."""

    differing: int
    numel: int

    @property
    def equal(self) -> bool:
        return self.differing == 0

    @property
    def few(self) -> bool:
        return 0 < self.differing <= few_elements(self.numel)


class _Counter:
    """Differing elements counted piece by piece; `done` once past a few."""

    def __init__(self, numel: int):
        self.numel, self.differing = numel, 0

    def add(self, count: int) -> None:
        self.differing += count

    @property
    def done(self) -> bool:
        return self.differing > few_elements(self.numel)

    def result(self) -> Difference:
        return Difference(self.differing, self.numel)


def untied_head(embedding: str, config: str, remedy: str) -> str:
    """What is wrong with a head that differs from `embedding` in nearly every element:
    `config` ties it, and `remedy` says what to give instead."""
    return (
        f"an output layer of its own, unequal to [{embedding}] (trained untied),"
        f" but {config} says tie_word_embeddings=true; {remedy}"
    )


@dataclass(frozen=True)
class Unequal:
    """The verdict on a head unequal to the embedding it should copy: `damaged` (exit 1:
    the bytes, not the config, are wrong) or trained untied (another config is needed: the
    caller's exit code says whose config it was), and `what` in words."""

    damaged: bool
    what: str


def unequal_verdict(
    difference: Difference,
    embedding: str,
    changed: list[str],
    config: str,
    remedy: str,
    check: str = DEEP_CHECK,
) -> Unequal:
    """Why a head differs from `embedding` (module docstring): `changed` names the files
    holding either that no longer match the manifest's digests; `check` says how to check
    the bytes of what was read (a DCP: `validate --deep`)."""
    differ = f"differs from [{embedding}] in {_count(difference)} of {difference.numel} elements"
    if changed:
        return Unequal(
            True,
            f"{differ}, and {first_of(changed, 1)}, which holds them, differs from the manifest"
            f" (bytes changed after save): damaged, not trained untied; {check}",
        )
    if difference.few:
        return Unequal(
            True,
            f"{differ}: damaged rather than trained untied (training a head apart changes"
            f" nearly every element); {check} (if it was trained untied after all: {remedy})",
        )
    return Unequal(False, untied_head(embedding, config, remedy))


def dcp_verdict(
    reader: CheckpointReader,
    paths: layout.CheckpointPaths | None,
    keys: tuple[str, str],
    config: str,
    remedy: str,
) -> Unequal | None:
    """None when the stored head and embedding (`keys`) are equal; else why not
    (`unequal_verdict`), the files holding them checked against the manifest of `paths`
    (a local checkpoint's; None: no manifest to check) first."""
    from mfsdp_ckpt.check.tensor_digests import changed_files

    head, embedding = keys
    difference = dcp_difference(reader, head, embedding)
    if difference.equal:
        return None
    changed = changed_files(paths, reader, keys)
    return unequal_verdict(difference, embedding, changed, config, remedy)


def _count(difference: Difference) -> str:
    """`only 3`, or `more than 16` where the count stopped (`Difference`)."""
    if difference.few:
        return f"only {difference.differing}"
    return f"more than {few_elements(difference.numel)}"


def dcp_difference(reader: CheckpointReader, first: str, second: str) -> Difference:
    """How two tensors of a DCP differ (equal: the same bytes): an alias (the same storage)
    without reading; chunk by chunk, a piece at a time, when both are sharded alike (as
    FSDP shards same-shaped weights); else read whole. Tensors of other shapes, or of an
    integer dtype against another, differ in every element."""
    a, b = reader.tensors[first], reader.tensors[second]
    for entry in (a, b):  # metadata claiming more than its files hold is named as such
        reader.check_readable(entry)
    if a.shape != b.shape or (
        a.dtype != b.dtype and not (a.dtype.is_floating_point and b.dtype.is_floating_point)
    ):
        return Difference(max(a.numel, 1), max(a.numel, 1))
    counter = _Counter(a.numel)
    if stored_once(a, b):
        return counter.result()
    left, right = _by_offsets(a), _by_offsets(b)
    if [(c.offsets, c.sizes) for c in left] == [(c.offsets, c.sizes) for c in right]:
        for x, y in zip(left, right):
            _count_chunks(reader, a, x, b, y, counter)
            if counter.done:
                break
        return counter.result()
    whole = reader.read_tensor(first), reader.read_tensor(second)
    _count_tensors(*whole, counter)
    return counter.result()


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


def _count_chunks(
    reader: CheckpointReader, a: TensorEntry, x: Chunk, b: TensorEntry, y: Chunk, counter: _Counter
) -> None:
    """One chunk of each: their raw payloads compared piece by piece where DCP wrote plain
    bytes (the usual case), else the decoded chunks."""
    at, bt = reader.raw_payload_offset(a, x), reader.raw_payload_offset(b, y)
    if at is None or bt is None or x.file is None or y.file is None:
        _count_tensors(reader.read_chunk(a, x), reader.read_chunk(b, y), counter)
        return
    files, offsets = (x.file, y.file), (at, bt)

    def read(which: int, start: int, size: int) -> bytes:
        return reader.store.read_range(files[which], offsets[which] + start, size)

    if a.dtype == b.dtype:
        _count_same_dtype(x.numel, a.dtype.itemsize, read, counter)
    else:
        _count_pieces(x.numel, (a.dtype, b.dtype), read, counter)


def _count_same_dtype(
    numel: int, itemsize: int, read: Callable[[int, int, int], bytes | bytearray], counter: _Counter
) -> None:
    """Two stored runs of `numel` elements of one dtype, compared as bytes a piece at a
    time; the elements of a piece that differs are counted."""
    total = numel * itemsize
    step = max(itemsize, PIECE_BYTES - PIECE_BYTES % itemsize)
    for start in range(0, total, step):
        size = min(step, total - start)
        first, second = read(0, start, size), read(1, start, size)
        if first != second:
            counter.add(_differing_items(first, second, itemsize))
            if counter.done:
                return


def _differing_items(first: bytes | bytearray, second: bytes | bytearray, itemsize: int) -> int:
    """How many `itemsize`-byte elements of two equal-length byte runs differ."""
    import torch

    left, right = (torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in (first, second))
    return int((left != right).reshape(-1, itemsize).any(dim=1).sum())


def _count_tensors(first: torch.Tensor, second: torch.Tensor, counter: _Counter) -> None:
    """Two decoded tensors: bits compared in their own dtype (so NaN equals the same NaN
    and -0.0 differs from 0.0), values in float64 across dtypes."""
    import torch

    if first.dtype == second.dtype:
        left, right = (t.contiguous().reshape(-1).view(torch.uint8) for t in (first, second))
        counter.add(int((left != right).reshape(-1, first.element_size()).any(dim=1).sum()))
        return
    _count_values(first, second, counter)


def _count_values(first: torch.Tensor, second: torch.Tensor, counter: _Counter) -> None:
    """Differing values of two float tensors of different dtypes: compared in float64
    (exact for every float dtype), a bounded piece of elements at a time; NaN equals NaN
    there (a copy of a NaN is a NaN: `--allow-nonfinite` decides about those)."""
    import torch

    left, right = first.reshape(-1), second.reshape(-1)
    step = PIECE_BYTES // 8
    for i in range(0, left.numel(), step):
        x, y = (t[i : i + step].to(torch.float64) for t in (left, right))
        unequal = (x.isnan() != y.isnan()) | (x.nan_to_num(0.0) != y.nan_to_num(0.0))
        counter.add(int(unequal.sum()))
        if counter.done:
            return


def _count_pieces(
    numel: int,
    dtypes: tuple[DType, DType],
    read: Callable[[int, int, int], bytes | bytearray],
    counter: _Counter,
) -> None:
    """`_count_values` over two stored runs of `numel` elements of `dtypes`, `read(which,
    byte start, size)` giving a piece of the first (0) or second (1): memory stays a piece
    whatever the tensor."""
    import torch

    count = max(1, PIECE_BYTES // max(d.itemsize for d in dtypes))
    for start in range(0, numel, count):
        n = min(count, numel - start)
        first, second = (
            torch.frombuffer(
                bytearray(read(which, start * dtype.itemsize, n * dtype.itemsize)),
                dtype=dtype.torch,
            )
            for which, dtype in enumerate(dtypes)
        )
        _count_values(first, second, counter)
        if counter.done:
            return


def safetensors_difference(source: SafetensorsSource, first: str, second: str) -> Difference:
    """How two tensors of a Hugging Face model dir differ (equal: the same bytes, or in
    other float dtypes the same values), read a piece at a time."""
    a, b = source.tensors[first], source.tensors[second]
    if a.shape != b.shape or (
        a.dtype != b.dtype and not (a.dtype.is_floating_point and b.dtype.is_floating_point)
    ):
        return Difference(max(a.numel, 1), max(a.numel, 1))
    counter = _Counter(a.numel)
    read = partial(_read_stored, source, (a, b))
    if a.dtype != b.dtype:
        _count_pieces(a.numel, (a.dtype, b.dtype), read, counter)
    else:
        _count_same_dtype(a.numel, a.dtype.itemsize, read, counter)
    return counter.result()


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
    "DEEP_CHECK",
    "EMBEDDING",
    "HEAD",
    "MCORE_EMBEDDING",
    "MCORE_HEAD",
    "PIECE_BYTES",
    "Difference",
    "Unequal",
    "dcp_difference",
    "dcp_verdict",
    "few_elements",
    "safetensors_difference",
    "stored_once",
    "unequal_verdict",
    "untied_head",
]
