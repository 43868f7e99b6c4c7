"""DCP reader and planner for `dcp.load` that never unpickle untrusted bytes.

Stock DCP unpickles `.metadata` with `pickle.load` and loads non-tensor items with
`torch.load(weights_only=False)`: resuming from a crafted checkpoint would run its code.
These two overrides swap in the allow-listed metadata loader and weights-only loading;
the reader also refuses file names that leave the checkpoint directory (`../x`, absolute
paths, symlinks pointing out), which stock DCP would follow. Everything else is stock
DCP, so resharding across world sizes works unchanged.
"""

from __future__ import annotations

import io
from typing import Any

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from mfsdp_ckpt.layout import DCP_METADATA_FILE
from mfsdp_ckpt.safe_metadata import load_metadata
from mfsdp_ckpt.storage import LocalByteStore


class SafeFileSystemReader(FileSystemReader):
    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = load_metadata(f"{self.path}/{DCP_METADATA_FILE}")
        store = LocalByteStore(self.path)
        storage = metadata.storage_data if isinstance(metadata.storage_data, dict) else {}
        for info in storage.values():
            store.size(str(getattr(info, "relative_path", "")))  # raises CheckpointFileError if it escapes
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        loaded = torch.load(value, map_location="cpu", weights_only=True)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded
