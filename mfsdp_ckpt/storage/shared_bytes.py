"""Which storage entries of a DCP checkpoint name the same bytes, and whether they may.

Every (key, chunk) of a DCP checkpoint has its own storage entry (file, offset, length),
and DCP's readers read each entry on its own; nothing in the format stops two entries from
naming the same bytes. One sharing is honest: a tied output layer stored once, as
import-hf stores a tied `lm_head.weight`: an exact alias of the embedding (same dtype,
shape and chunks, each naming the embedding's blob: same file, offset and length), both
keys loading its bytes. torch's DCP never writes two keys to one blob. Any other sharing
is a crafted or damaged checkpoint: two other weights on one blob (layers 1..511 naming
layer 0's bytes: a small checkpoint that validates as one hundreds of times larger and
exports identical layers),
entries that partly overlap, one blob read as tensors of different dtype or shape, a
tensor's blob also read as a non-tensor value, or one tensor's two chunks on one blob.
Each would make a load decode bytes as something they were never written as.

`byte_sharing` sorts the entries by place (O(n log n) in the number of chunks, nothing
read but the parsed metadata; seconds for half a million, reported as two checks: `places`
lists them, `shared bytes` compares neighbours) and reports both: the aliases, and the
sharing refused (the first, in the order of the files' bytes, and a count).
`CheckpointReader` refuses a checkpoint with any, so validate, inspect and export all stop
at it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from mfsdp_ckpt.format.dcp_metadata import CheckReport, CheckSteps
from mfsdp_ckpt.format.state_keys import TIED_PAIRS
from mfsdp_ckpt.storage.reader import Chunk, ObjectEntry, TensorEntry


@dataclass(frozen=True)
class _Blob:
    """One storage entry: its place, its key, and the tensor chunk it holds (None: an object)."""

    file: str
    offset: int
    length: int
    key: str
    order: int  # the key's place in .metadata: the earliest of an alias group is its owner
    tensor: TensorEntry | None = None
    chunk: Chunk | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length

    def span(self) -> str:
        return f"bytes [{self.offset}, {self.end}) of {self.file}"


@dataclass
class ByteSharing:
    # tensor -> the tensor (earliest in .metadata) whose bytes it names: exact aliases only
    aliases: dict[str, str] = field(default_factory=dict)
    alias_bytes: int = 0  # payload bytes the aliases name without storing them again
    problem: str | None = None  # the first sharing refused, in the order of the files' bytes
    refused: int = 0  # entries whose sharing is refused

    def refusal(self) -> str | None:
        """One line: the first sharing refused, and how many more there are."""
        if self.problem is None:
            return None
        more = self.refused - 1
        return self.problem + (f" (+{more} more entries that share bytes)" if more else "")


def byte_sharing(
    tensors: Mapping[str, TensorEntry],
    objects: Mapping[str, ObjectEntry],
    report: CheckReport | None = None,
) -> ByteSharing:
    """The aliases among `tensors` and every other sharing of bytes among all entries; the
    progress goes to `report` (`CheckSteps`, per chunk)."""
    result = ByteSharing()
    signatures = _signatures(tensors)
    blobs = _blobs(tensors, objects, report)
    steps = CheckSteps(report, "shared bytes", len(blobs))
    reach: _Blob | None = None  # the blob reaching furthest so far in the current file
    for _, grouped in itertools.groupby(blobs, key=_place):
        group = list(grouped)
        steps.add(len(group))
        owner, *others = sorted(group, key=lambda blob: blob.order)
        if reach is not None and reach.file == owner.file and owner.offset < reach.end:
            _refuse(
                result,
                f"[{owner.key}] at {owner.span()} overlaps [{reach.key}] at"
                f" [{reach.offset}, {reach.end}) (partly shared bytes)",
            )
        for index, other in enumerate(others):
            why = _not_an_alias(owner, other, signatures, index)
            if why is not None:
                _refuse(result, f"[{other.key}] names the {owner.span()} of [{owner.key}], {why}")
            elif other.tensor is not None and other.chunk is not None:
                result.aliases.setdefault(other.key, owner.key)
                result.alias_bytes += other.chunk.numel * other.tensor.dtype.itemsize
        if reach is None or reach.file != owner.file or owner.end > reach.end:
            reach = owner
    return result


def _blobs(
    tensors: Mapping[str, TensorEntry],
    objects: Mapping[str, ObjectEntry],
    report: CheckReport | None,
) -> list[_Blob]:
    """Every storage entry that names at least one byte, sorted by place."""
    total = sum(len(entry.chunks) for entry in tensors.values())
    steps = CheckSteps(report, "places", total)
    blobs = []
    for order, entry in enumerate(tensors.values()):
        blobs += [
            _Blob(chunk.file, chunk.file_offset, chunk.length, entry.name, order, entry, chunk)
            for chunk in entry.chunks
            if chunk.file is not None and chunk.length
        ]
        steps.add(len(entry.chunks))
    blobs += [
        _Blob(entry.file, entry.file_offset, entry.length, entry.name, len(tensors) + order)
        for order, entry in enumerate(objects.values())
        if entry.file is not None and entry.length
    ]
    return sorted(blobs, key=_place)


def _place(blob: _Blob) -> tuple[str, int, int]:
    return blob.file, blob.offset, blob.length


def _signatures(tensors: Mapping[str, TensorEntry]) -> dict[str, int]:
    """Each tensor's metadata (dtype, shape, chunk table) as a small int, equal for equal
    metadata: built once, so comparing two tensors costs O(1) however many chunks they have."""
    seen: dict[tuple, int] = {}
    return {
        name: seen.setdefault(
            (entry.dtype.name, entry.shape, tuple(sorted(map(_chunk_key, entry.chunks)))),
            len(seen),
        )
        for name, entry in tensors.items()
    }


def _not_an_alias(owner: _Blob, other: _Blob, signatures: dict[str, int], index: int) -> str | None:
    """Why `other`, the `index`-th after `owner` to name its bytes, is not an exact alias of
    a tied output layer, else None."""
    a, b = owner.tensor, other.tensor
    if a is None or b is None or owner.chunk is None or other.chunk is None:
        return "but a non-tensor value shares no bytes"
    if a.name == b.name:
        return "for another chunk of that tensor"
    if index or not _tied_pair(a.name, b.name):
        return (
            "but only a tied output layer may name its embedding's bytes: two other"
            " weights would load the same values"
        )
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"but as {b.dtype.name} {b.shape}, not {a.dtype.name} {a.shape}"
    if signatures[a.name] != signatures[b.name] or _chunk_key(owner.chunk) != _chunk_key(
        other.chunk
    ):
        return "but for a different chunk"
    return None


def _tied_pair(first: str, second: str) -> bool:
    """Whether two keys are a tied model's output layer and its input embedding, in either
    order, under one entry (`model.lm_head.weight`, `model.model.embed_tokens.weight`)."""
    return _head_of(first, second) or _head_of(second, first)


def _head_of(head: str, embedding: str) -> bool:
    for out, inp in TIED_PAIRS:
        if head == out or head.endswith(f".{out}"):
            entry = head[: len(head) - len(out)]
            return embedding.startswith(entry) and (
                embedding == inp or embedding.endswith(f".{inp}")
            )
    return False


def _chunk_key(chunk: Chunk) -> tuple:
    return chunk.offsets, chunk.sizes, chunk.transforms


def _refuse(result: ByteSharing, problem: str) -> None:
    """Count the refusal; the first one found is the one said."""
    if result.problem is None:
        result.problem = problem
    result.refused += 1


__all__ = ["ByteSharing", "byte_sharing"]
