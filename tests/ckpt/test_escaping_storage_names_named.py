"""A `.metadata` storage entry naming a file outside the checkpoint (`../x`, an absolute
path) is refused in words that name the checkpoint's `.metadata` and the entry as written.

Was: `error: '../dist_ckpt/__0_0.distcp': file name escapes the checkpoint directory`, with
Python's repr quotes and no checkpoint named (export-hf of a checkpoint without a manifest,
where validate's manifest comparison does not come first)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch

from mfsdp_ckpt.format.dcp_metadata import load_metadata
from mfsdp_ckpt.storage.byte_store import CheckpointFileError, LocalByteStore
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.megatron_checkpoints import save_dcp


@pytest.mark.parametrize("name", ["../dist_ckpt/__0_0.distcp", "/etc/passwd", "a/../../x"])
def test_the_store_names_the_metadata_and_the_entry(tmp_path, name):
    root = tmp_path / "step" / "dist_ckpt"
    root.mkdir(parents=True)
    with pytest.raises(CheckpointFileError) as caught:
        LocalByteStore(root).read_range(name, 0, 1)
    assert str(caught.value) == (f"{root}/.metadata: file {name} escapes the checkpoint directory")


def test_reading_a_tensor_through_such_an_entry_says_so(tmp_path):
    dcp = save_dcp({"model": {"w": torch.ones(4)}}, tmp_path / "dist_ckpt")
    metadata = load_metadata(dcp / ".metadata")
    for index, info in list(metadata.storage_data.items()):
        metadata.storage_data[index] = dataclasses.replace(
            info, relative_path=f"../dist_ckpt/{info.relative_path}"
        )
    (dcp / ".metadata").write_bytes(pickle.dumps(metadata))  # a bare DCP: no manifest
    with pytest.raises(CheckpointFileError) as caught:
        CheckpointReader(dcp).read_tensor("model.w")
    message = str(caught.value)
    assert message.startswith(f"{dcp}/.metadata: file ../dist_ckpt/"), message
    assert "'" not in message, message
