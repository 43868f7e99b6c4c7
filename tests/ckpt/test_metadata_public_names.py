"""The names other modules and scripts use for `.metadata`'s classes and allow-lists are
public, and what a `.metadata` pickles stays DCP's own names.

scripts/pickle_budget.py and the writers reached into `dcp_metadata` for `_plain_classes`,
`_records`, `_StorageInfo` and `_MEM_FORMAT_ENCODING`; the class names are DCP's (a
`.metadata` names them), so the public names are aliases and the classes keep theirs."""

from __future__ import annotations

import dataclasses
import pickle

from mfsdp_ckpt.format import dcp_metadata
from mfsdp_ckpt.format.dcp_metadata import (
    MemFormatEncoding,
    StorageInfo,
    allowed_classes,
    load_plain_metadata_bytes,
    record_types,
)
from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.format.torch_save_format import dump_metadata, tensor_metadata
from tests.support.metadata_reads import load_metadata_bytes


def _metadata() -> dcp_metadata.Metadata:
    index = dcp_metadata.MetadataIndex("model.w", (0, 0))
    return dcp_metadata.Metadata(
        state_dict_metadata={"model.w": tensor_metadata(BY_NAME["float32"], (2, 3))},
        storage_data={index: StorageInfo("__0_0.distcp", 0, 24)},
    )


def test_what_the_writer_pickles_is_named_as_dcp_names_it():
    data = dump_metadata(_metadata())
    assert b"torch.distributed.checkpoint.filesystem\n_StorageInfo\n" in data
    assert b"torch.distributed.checkpoint.metadata\n_MEM_FORMAT_ENCODING\n" in data
    assert b"\nStorageInfo\n" not in data
    assert b"MemFormatEncoding" not in data


def test_dcp_itself_reads_it_into_its_own_classes():
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    data = dump_metadata(_metadata())
    theirs = pickle.loads(data)  # torch's own classes, by the names pickled
    (info,) = theirs.storage_data.values()
    assert type(info) is _StorageInfo and (info.relative_path, info.length) == ("__0_0.distcp", 24)
    properties = theirs.state_dict_metadata["model.w"].properties
    assert properties.memory_format is torch.contiguous_format  # DCP decodes the member
    assert type(load_metadata_bytes(data).state_dict_metadata["model.w"]).__module__.startswith(
        "torch.distributed.checkpoint"
    )
    plain = load_plain_metadata_bytes(data)
    (mine,) = plain.storage_data.values()
    assert type(mine) is StorageInfo
    assert plain.state_dict_metadata["model.w"].properties.memory_format is (
        MemFormatEncoding.TORCH_CONTIGUOUS_FORMAT
    )


def test_the_two_tables_admit_the_same_names_and_build_only_records():
    plain, dcp = allowed_classes("plain"), allowed_classes("dcp")
    assert set(plain) == set(dcp)
    assert plain[("torch.distributed.checkpoint.filesystem", "_StorageInfo")] is StorageInfo
    for table in (plain, dcp):
        records = record_types(table)
        assert records and all(dataclasses.is_dataclass(r) for r in records)
        assert set(records) <= set(table.values())
