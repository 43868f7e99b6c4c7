"""The small torch.save'd records of Megatron checkpoints (`args`, `train_state.pt`, a step
number) fail alike in every reader of `saved_objects`: one CheckpointFormatError naming
the record, for a refused global and for damaged bytes."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.saved_objects import load_namespace, load_plain, load_scalars
from tests.support.torch_archives import torch_archive


@pytest.mark.parametrize("load", [load_plain, load_namespace, load_scalars])
@pytest.mark.parametrize(
    "pickled, words",
    [
        (b"\x80\x02cos\nsystem\nq\x00.", "refusing"),  # a global no such record names
        (b"\x80\x02]K\x01a0.", "unreadable pickle (IndexError: pop from empty list)"),  # damaged
    ],
    ids=["global", "damaged"],
)
def test_each_reader_names_the_record_in_one_line(load, pickled, words):
    with pytest.raises(CheckpointFormatError) as raised:
        load(torch_archive(pickled), "iter_0000002/train_state.pt")
    message = str(raised.value)
    assert message.startswith("iter_0000002/train_state.pt: ") and words in message
    assert "\n" not in message and raised.value.__cause__ is None
