"""Whether a tensor's chunks, as `.metadata` lists them, tile it exactly and whether their
blobs can hold them: the checks that refuse damaged metadata before anything is read or
allocated (`CheckpointReader.check_readable`, and validate's storage checks). Time stays
bounded on hostile metadata: problems are listed up to a count, and irregular tilings
draw on one budget per checkpoint (`PairBudget`).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from mfsdp_ckpt.storage.blob_decode import undecodable_transforms

if TYPE_CHECKING:
    from mfsdp_ckpt.storage.reader import Chunk, TensorEntry


def chunk_backing_problem(entry: TensorEntry, chunk: Chunk) -> str | None:
    """Why `chunk`'s blob cannot hold the elements its metadata declares, else None. An
    uncompressed torch.save blob holds its storage's bytes plus a zip directory, so it is
    never shorter than them. A compressed one may be (only decoding tells), but its
    transforms must be ones this machine can undo: otherwise every read of it fails, and
    validate would call valid what export then refuses after reserving its output."""
    if chunk.file is None or not chunk.numel:
        return None
    if chunk.transforms:
        return undecodable_transforms(chunk.transforms)
    if chunk.length < chunk.numel * entry.dtype.itemsize:
        return f"a blob of {chunk.length} bytes cannot hold {chunk.numel} {entry.dtype} elements"
    return None


MAX_LISTED_PROBLEMS = 20  # per tensor; 40,000 bad chunks are one problem said 40,000 times


def chunk_coverage_problems(entry: TensorEntry, pairs: PairBudget | None = None) -> list[str]:
    """Why the chunks do not tile the tensor exactly (empty list when they do).

    In bounds, pairwise disjoint and summing to the tensor's element count is an exact
    tiling. Time is O(n log n) in the number of chunks for every layout FSDP, TP and
    Megatron-FSDP write (slabs along one dim, grids); see `_overlaps`. An irregular
    tiling draws on `pairs` (a checkpoint's: `CheckpointReader.coverage_problems`; a
    budget of its own when None)."""
    problems: list[str] = []
    past = 0
    for chunk in entry.chunks:
        for dim, (off, size, full) in enumerate(zip(chunk.offsets, chunk.sizes, entry.shape)):
            if off + size > full:
                past += 1
                if len(problems) < MAX_LISTED_PROBLEMS:
                    problems.append(
                        f"chunk at {chunk.offsets} size {chunk.sizes} runs past dim {dim} ({full})"
                    )
                break
    if past > len(problems):
        problems.append(f"{past - len(problems)} more chunks run past the tensor's shape")
    if problems:
        return problems
    nonempty = [c for c in entry.chunks if c.numel > 0]
    covered = sum(c.numel for c in nonempty)
    budget = pairs if pairs is not None else PairBudget()
    overlap = _overlaps(nonempty, tuple(range(len(entry.shape))), budget)
    if overlap is None:
        problems.append(f"{len(nonempty)} chunks form an irregular tiling too large to check")
    elif overlap:
        problems.append("chunks overlap")
    elif covered < entry.numel:
        problems.append(f"chunks cover {covered} of {entry.numel} elements (gap)")
    elif covered > entry.numel:
        problems.append(f"chunks cover {covered} elements, more than the tensor's {entry.numel}")
    return problems


class PairBudget:
    """Chunk pairs `_overlaps` may still compare one by one: about a second's worth. One
    budget serves a whole checkpoint (its reader's), not each tensor: a .metadata can name
    one irregular chunk list under thousands of keys, each spending a second of its own."""

    PAIRS = 1_000_000

    def __init__(self) -> None:
        self.left = self.PAIRS

    def spend(self, pairs: int) -> bool:
        """Take `pairs` from the budget; False (nothing taken) when it has not that many."""
        if pairs > self.left:
            return False
        self.left -= pairs
        return True


def _overlaps(chunks: list[Chunk], dims: tuple[int, ...], budget: PairBudget) -> bool | None:
    """Whether two of these non-empty chunks share an element (None: too irregular to tell).

    Splits on a dim along which the chunks' distinct spans are disjoint (sorting decides
    that), then asks the same of each group of chunks sharing one span, on the other dims.
    Slabs and grids split all the way down: O(n log n) per dim. Chunks identical on every
    dim overlap. Only spans that partly overlap on every remaining dim fall back to
    comparing pairs, within `budget`."""
    pending = [(chunks, dims)]
    while pending:
        group, remaining = pending.pop()
        if len(group) < 2:
            continue
        if not remaining:
            return True  # same span on every dim
        for dim in remaining:
            spans: dict[tuple[int, int], list[Chunk]] = {}
            for chunk in group:
                spans.setdefault((chunk.offsets[dim], chunk.sizes[dim]), []).append(chunk)
            ordered = sorted(spans)
            if all(a[0] + a[1] <= b[0] for a, b in itertools.pairwise(ordered)):
                rest = tuple(d for d in remaining if d != dim)
                pending.extend((members, rest) for members in spans.values())
                break
        else:
            if not budget.spend(len(group) * (len(group) - 1) // 2):
                return None
            if _any_pair_overlaps(group, remaining):
                return True
    return False


def _any_pair_overlaps(chunks: list[Chunk], dims: tuple[int, ...]) -> bool:
    for i, a in enumerate(chunks):
        for b in chunks[i + 1 :]:
            if all(
                a.offsets[d] < b.offsets[d] + b.sizes[d]
                and b.offsets[d] < a.offsets[d] + a.sizes[d]
                for d in dims
            ):
                return True
    return False
