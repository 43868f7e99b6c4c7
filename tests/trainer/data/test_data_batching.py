import functools
import operator

import pytest

from trainer.data.batching import (
    collate_packed,
    global_batch,
    pack,
    plan_micro_batches,
    rank_share,
    shifted_targets,
)
from trainer.data.chat import Example
from trainer.loss import IGNORE_INDEX


def test_global_batches_cover_each_epoch_once_and_reshuffle():
    rows, size = 23, 5  # 4 full batches per epoch, 3 rows dropped
    epoch0 = [r for step in range(4) for r in global_batch(rows, size, step, seed=1, shuffle=True)]
    epoch1 = [
        r for step in range(4, 8) for r in global_batch(rows, size, step, seed=1, shuffle=True)
    ]
    assert len(set(epoch0)) == 20 and len(set(epoch1)) == 20
    assert epoch0 != epoch1
    assert global_batch(rows, size, 2, seed=1, shuffle=True) == global_batch(
        rows, size, 2, seed=1, shuffle=True
    )
    assert global_batch(rows, size, 1, seed=0, shuffle=False) == [5, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="larger than"):
        global_batch(4, 5, 0, seed=0, shuffle=False)


def test_rank_shares_partition_the_global_batch():
    batch = list(range(10))
    for world in (1, 2, 3):
        shares = [rank_share(batch, r, world) for r in range(world)]
        assert sorted(functools.reduce(operator.iadd, shares, [])) == batch


def test_packing_respects_budget_and_keeps_every_row():
    lengths = {0: 7, 1: 3, 2: 5, 3: 2, 4: 8, 5: 1}
    bins = pack(lengths, budget=8)
    assert sorted(r for b in bins for r in b) == sorted(lengths)
    assert all(sum(lengths[r] for r in b) <= 8 for b in bins)
    assert len(bins) == 4  # 26 tokens need at least 4 bins of 8
    with pytest.raises(ValueError, match="exceeds"):
        pack({0: 9}, budget=8)


def test_micro_batch_count_is_padded_with_empty_groups():
    examples = {i: Example([1] * 4, [1] * 4) for i in range(3)}
    groups = plan_micro_batches(examples, packing=False, max_tokens=0, micro_batch_size=2, count=4)
    assert groups == [[0, 1], [2], [], []]
    empty = collate_packed([], pad_id=0)
    assert empty.targets == 0 and empty.inputs["targets"].tolist() == [[IGNORE_INDEX]]


def test_targets_shift_within_documents_only():
    first = Example([10, 11, 12, 13], [0, 0, 1, 1])
    second = Example([20, 21, 22], [0, 1, 1])
    assert shifted_targets(first) == [IGNORE_INDEX, 12, 13, IGNORE_INDEX]
    batch = collate_packed([first, second], pad_id=0)
    assert batch.inputs["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2]]
    # the last token of document 1 never predicts the first of document 2
    assert batch.inputs["targets"].tolist() == [
        [IGNORE_INDEX, 12, 13, IGNORE_INDEX, 21, 22, IGNORE_INDEX]
    ]
    assert (batch.tokens, batch.targets, batch.doc_lengths) == (7, 4, [4, 3])
