"""From a dataset to the micro-batches one rank runs for one optimizer step.

Global batch `b` of epoch `e` is a fixed set of rows (a seeded permutation of the epoch),
independent of the world size; rank `r` of `w` takes rows `r, r+w, ...` of it. So a run can
resume on a different number of ranks and still see the same data per step.

Within a rank, rows become micro-batches either packed (documents laid end to end up to a
token budget, positions restarting at 0 for each document, so attention stays within a
document and no token is padding) or padded (fixed count of rows, padded to the longest).
Every rank must run the same number of forward/backward passes (each one gathers
parameters collectively), so ranks with fewer micro-batches add empty ones, which
become a single padding token with no loss.

Targets are shifted here: `targets[t]` is the token at t+1 when it is an assistant token
of the same document, else -100.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from trainer.data.chat import Example
from trainer.loss import IGNORE_INDEX


def epoch_order(num_rows: int, epoch: int, seed: int, shuffle: bool) -> list[int]:
    """The order of the rows in `epoch`, a pure function of its arguments: nothing about it
    is saved, so a resumed run (on any number of ranks) computes the same order again.
    Each epoch is shuffled differently (the seed mixes in `epoch`); without `shuffle`
    every epoch reads the rows as the file holds them."""
    order = list(range(num_rows))
    if shuffle:
        random.Random(seed * 100_003 + epoch).shuffle(order)
    return order


def global_batch(
    num_rows: int, global_batch_size: int, step: int, seed: int, shuffle: bool
) -> list[int]:
    """Row indices of optimizer step `step` (0-based); epochs drop their incomplete last batch."""
    per_epoch = num_rows // global_batch_size
    if per_epoch == 0:
        raise ValueError(
            f"data.global_batch_size={global_batch_size} is larger than the {num_rows} training "
            "rows"
        )
    epoch, index = divmod(step, per_epoch)
    order = epoch_order(num_rows, epoch, seed, shuffle)
    return order[index * global_batch_size : (index + 1) * global_batch_size]


def rank_share(rows: list[int], rank: int, world_size: int) -> list[int]:
    """Rank `rank`'s rows of a global batch: every `world_size`-th, from its own index. The
    batch is chosen without the world size, and strided rows give each rank a share of
    every part of it (at most one row more than another rank), so a run resumed on another
    number of ranks trains on the same rows per step."""
    return rows[rank::world_size]


def pack(lengths: dict[int, int], budget: int) -> list[list[int]]:
    """First-fit decreasing: rows (index -> length) into as few bins of <= budget tokens as it
    finds."""
    bins: list[list[int]] = []
    room: list[int] = []
    for row in sorted(lengths, key=lambda r: (-lengths[r], r)):
        size = lengths[row]
        if size > budget:
            raise ValueError(
                f"a {size}-token sequence exceeds data.max_tokens_per_micro_batch={budget}"
            )
        for slot, free in enumerate(room):
            if size <= free:
                bins[slot].append(row)
                room[slot] -= size
                break
        else:
            bins.append([row])
            room.append(budget - size)
    return bins


def fixed_size(rows: list[int], size: int) -> list[list[int]]:
    """`rows` in groups of `size`, the last one shorter (data.packing=false): each group is
    padded to its longest row, so micro_batch_size bounds the memory of one pass."""
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def pad_to_count(micro_batches: list[list[int]], count: int) -> list[list[int]]:
    """`micro_batches` and then empty ones, up to `count` (the most any rank has this step):
    every forward and backward gathers parameters collectively, so a rank that ran fewer
    passes than the others would leave them waiting on it. `collate` makes an empty one a
    single padding token with no loss."""
    return micro_batches + [[] for _ in range(count - len(micro_batches))]


@dataclass
class MicroBatch:
    # input_ids, position_ids, targets[, attention_mask (padded) | cu_seqlens (packed)]
    inputs: dict[str, torch.Tensor]
    tokens: int  # real (non-padding) tokens
    targets: int  # positions with a loss
    doc_lengths: list[int]  # for attention FLOPs

    def to(self, device: torch.device) -> MicroBatch:
        return MicroBatch(
            {k: v.to(device, non_blocking=True) for k, v in self.inputs.items()},
            self.tokens,
            self.targets,
            self.doc_lengths,
        )


def shifted_targets(example: Example) -> list[int]:
    """Position t's target: the next token when the loss mask trains it, else -100. Shifted
    within one document, whose last position never has a target: laid end to end in a
    packed row, no document learns to predict the first token of the next one."""
    ids, mask = example.input_ids, example.loss_mask
    return [ids[t + 1] if mask[t + 1] else IGNORE_INDEX for t in range(len(ids) - 1)] + [
        IGNORE_INDEX
    ]


def document_boundaries(lengths: list[int]) -> torch.Tensor:
    """`cu_seqlens` of documents laid end to end: [0, l0, l0 + l1, ...] as int32."""
    bounds = [0]
    for length in lengths:
        bounds.append(bounds[-1] + length)
    return torch.tensor(bounds, dtype=torch.int32)


def collate_packed(examples: list[Example], pad_id: int) -> MicroBatch:
    """One row [1, total tokens]; position ids restart per document (SDPA then masks per
    document) and `cu_seqlens` marks where each starts (variable-length attention reads it)."""
    if not examples:
        return _empty(pad_id)
    ids: list[int] = []
    positions: list[int] = []
    targets: list[int] = []
    for example in examples:
        ids += example.input_ids
        positions += range(len(example))
        targets += shifted_targets(example)
    inputs = {
        "input_ids": torch.tensor([ids]),
        "position_ids": torch.tensor([positions]),
        "targets": torch.tensor([targets]),
        "cu_seqlens": document_boundaries([len(e) for e in examples]),
    }
    return MicroBatch(
        inputs, len(ids), sum(t != IGNORE_INDEX for t in targets), [len(e) for e in examples]
    )


def collate_padded(examples: list[Example], pad_id: int) -> MicroBatch:
    """[rows, longest] with right padding and an attention mask."""
    if not examples:
        return _empty(pad_id)
    width = max(len(e) for e in examples)
    ids = torch.full((len(examples), width), pad_id)
    targets = torch.full((len(examples), width), IGNORE_INDEX)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, example in enumerate(examples):
        n = len(example)
        ids[row, :n] = torch.tensor(example.input_ids)
        targets[row, :n] = torch.tensor(shifted_targets(example))
        mask[row, :n] = 1
    positions = torch.arange(width).expand(len(examples), width).clone()
    inputs = {
        "input_ids": ids,
        "position_ids": positions,
        "targets": targets,
        "attention_mask": mask,
    }
    return MicroBatch(
        inputs, int(mask.sum()), int((targets != IGNORE_INDEX).sum()), [len(e) for e in examples]
    )


def _empty(pad_id: int) -> MicroBatch:
    """A one-token micro-batch without loss: keeps this rank in step with the others'
    collectives."""
    inputs = {
        "input_ids": torch.tensor([[pad_id]]),
        "position_ids": torch.tensor([[0]]),
        "targets": torch.tensor([[IGNORE_INDEX]]),
    }
    return MicroBatch(inputs, 0, 0, [])


def plan_micro_batches(
    examples: dict[int, Example],
    packing: bool,
    max_tokens: int,
    micro_batch_size: int,
    count: int | None = None,
) -> list[list[int]]:
    """Row groups for this rank; with `count`, padded with empty groups to exactly that many."""
    if packing:
        groups = pack({row: len(example) for row, example in examples.items()}, max_tokens)
    else:
        groups = fixed_size(sorted(examples), micro_batch_size)
    return pad_to_count(groups, count) if count is not None else groups


def collate(examples: list[Example], packing: bool, pad_id: int) -> MicroBatch:
    return collate_packed(examples, pad_id) if packing else collate_padded(examples, pad_id)
