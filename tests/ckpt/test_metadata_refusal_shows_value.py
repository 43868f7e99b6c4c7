"""A .metadata number out of range is refused with the number, naming the tensor: a negative
chunk offset read "expected at most 64 ints in [0, 2**63), got tuple", the one thing the line
left out being the bad value (-64)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

from mfsdp_ckpt.errors import UnsafeMetadataError
from tests.support.metadata_reads import load_metadata_bytes

NAME = "model.norm.weight"


def _metadata(offsets=(0,), sizes=(128,), shape=(128,), **storage) -> bytes:
    info = _StorageInfo("__0_0.distcp", 0, 512)
    entry = TensorStorageMetadata(
        TensorProperties(dtype=torch.float32),
        torch.Size(shape),
        [ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes))],
    )
    index = MetadataIndex(NAME, torch.Size(offsets))
    metadata = Metadata({NAME: entry}, storage_data={index: dataclasses.replace(info, **storage)})
    return pickle.dumps(metadata)


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        (
            {"offsets": (-64,)},
            f"{NAME}: chunk offsets: expected at most 64 ints in [0, 2**63), got (-64,)",
        ),
        (
            {"sizes": (64, -2)},
            f"{NAME}: chunk sizes: expected at most 64 ints in [0, 2**63), got (64, -2)",
        ),
        ({"shape": (-128,)}, f"{NAME}: shape: expected at most 64 ints in [0, 2**63), got (-128,)"),
        (
            {"shape": (2**64,)},
            f"{NAME}: shape: expected at most 64 ints in [0, 2**63), got (18446744073709551616,)",
        ),
        (
            {"shape": (2**1000,)},
            f"{NAME}: shape: expected at most 64 ints in [0, 2**63), got (an int of 1001 bits,)",
        ),
        (
            {"shape": (1,) * 65},
            f"{NAME}: shape: expected at most 64 ints in [0, 2**63), got (1, 1, ",
        ),
        ({"offset": -1000}, f"{NAME}: storage: offset is -1000, not an int in [0, 2**63)"),
        ({"length": -5}, f"{NAME}: storage: length is -5, not an int in [0, 2**63)"),
    ],
)
def test_the_bad_value_is_shown(fields, said):
    with pytest.raises(UnsafeMetadataError) as caught:
        load_metadata_bytes(_metadata(**fields))
    message = str(caught.value)
    assert said in message and len(message) < 400, message


def test_a_good_entry_is_read():
    assert NAME in load_metadata_bytes(_metadata()).state_dict_metadata
