"""Write a DCP checkpoint from one process, one tensor at a time, with no process group.

`dcp.save` plans over the whole state dict, so every tensor must be in memory (or at
least referenced) before the first byte is written. Import has the opposite shape: a
tensor exists only between its read and its write. This writer produces the same files
`dcp.save` with torch's FileSystemWriter does on one rank, but item by item:

* each tensor is `torch.save`d into the data file at the current position, exactly as
  FileSystemWriter's `_write_item` does, and its (offset, length) recorded;
* a non-tensor value (Megatron-LM's `checkpoint_version`, `iteration`) is a torch.save'd
  BYTE_IO blob, as DCP stores any non-tensor leaf;
* at the end `.metadata` is DCP's own `Metadata` (each tensor one whole chunk, planner
  data mapping flat keys to their nested path, storage data to file ranges), pickled as
  FileSystemWriter pickles it, after the data file is fsynced.

So `dcp.load`, Megatron-LM's fsdp_dtensor load and our offline reader read it as they
read any single-rank save. Every byte written is hashed on the way (`_HashingStream`),
so a manifest costs no second pass.
"""

from __future__ import annotations

import io
import os
import pickle
import uuid
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION, _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from mfsdp_ckpt.dcp_writer import _HashingStream
from mfsdp_ckpt.layout import DCP_METADATA_FILE, fsync_path
from mfsdp_ckpt.manifest import FileRecord

DATA_FILE = "__0_0.distcp"  # what rank 0's first writer thread names its file


class StreamingDcpWriter:
    """Append items to one `.distcp` file, then `finish()` writes `.metadata`.

    Keys are nested paths as the state dict would hold them: ("model", "module.decoder...")
    is stored under the flat key "model.module.decoder..." like DCP's flatten_state_dict.
    """

    def __init__(self, dist_ckpt_dir: str | os.PathLike):
        self.root = Path(dist_ckpt_dir)
        self.root.mkdir(parents=True, exist_ok=True)
        self._file = open(self.root / DATA_FILE, "wb")
        self._stream = _HashingStream(self._file)
        self._tensors: dict[str, TensorStorageMetadata | BytesStorageMetadata] = {}
        self._storage: dict[MetadataIndex, _StorageInfo] = {}
        self._planner: dict[str, tuple[str, ...]] = {}

    def _claim(self, path: tuple[str, ...]) -> str:
        key = ".".join(path)
        if key in self._planner:
            raise ValueError(f"{key}: written twice")
        self._planner[key] = path
        return key

    def add_tensor(self, path: tuple[str, ...], tensor: torch.Tensor) -> None:
        key = self._claim(path)
        tensor = tensor.detach().contiguous()
        offset = self._stream.size
        torch.save(tensor, self._stream)
        zeros = torch.Size([0] * tensor.dim())
        self._tensors[key] = TensorStorageMetadata(
            properties=TensorProperties(dtype=tensor.dtype),
            size=tensor.shape,
            chunks=[ChunkStorageMetadata(offsets=zeros, sizes=tensor.shape)],
        )
        self._storage[MetadataIndex(key, zeros)] = _StorageInfo(DATA_FILE, offset, self._stream.size - offset)

    def add_object(self, path: tuple[str, ...], value: Any) -> None:
        key = self._claim(path)
        blob = io.BytesIO()
        torch.save(value, blob)
        offset = self._stream.size
        self._stream.write(blob.getbuffer())
        self._tensors[key] = BytesStorageMetadata()
        self._storage[MetadataIndex(key)] = _StorageInfo(DATA_FILE, offset, self._stream.size - offset)

    def finish(self) -> dict[str, FileRecord]:
        """Flush the data, write `.metadata`; returns size and sha256 of both, by file name."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        records = {DATA_FILE: self._stream.record()}
        metadata = Metadata(
            state_dict_metadata=self._tensors,
            planner_data=self._planner,
            storage_data=self._storage,
            storage_meta=StorageMeta(checkpoint_id=str(self.root), save_id=str(uuid.uuid4())),
            version=CURRENT_DCP_VERSION,
        )
        with open(self.root / DCP_METADATA_FILE, "wb") as handle:
            stream = _HashingStream(handle)
            pickle.dump(metadata, stream)
            handle.flush()
            os.fsync(handle.fileno())
        records[DCP_METADATA_FILE] = stream.record()
        fsync_path(self.root)
        return records

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
