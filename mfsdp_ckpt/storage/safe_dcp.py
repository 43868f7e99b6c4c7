"""DCP reader and planner for `dcp.load` that never unpickle untrusted bytes.

Stock DCP unpickles `.metadata` with `pickle.load` and loads non-tensor items with
`torch.load(weights_only=False)`: resuming from a crafted checkpoint would run its code.
These overrides swap in the allow-listed metadata loader, blob_guard's structure checks
before each blob is loaded, and weights-only loading;
the reader also refuses file names that leave the checkpoint directory (`../x`, absolute
paths, symlinks pointing out), which stock DCP would follow. Everything else is stock
DCP, so resharding across world sizes works unchanged.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner
from torch.futures import Future

from mfsdp_ckpt.check.printable import is_torch_refusal, torch_load_reason
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.blob_guard import check_blob
from mfsdp_ckpt.format.dcp_metadata import load_metadata
from mfsdp_ckpt.format.layout import DCP_METADATA_FILE
from mfsdp_ckpt.format.restricted_pickle import DETAIL_CHARS
from mfsdp_ckpt.storage.blob_decode import BLOB_OVERHEAD, MAX_OBJECT_BYTES, decode_blob
from mfsdp_ckpt.storage.byte_store import LocalByteStore, RangeFile
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory


class SafeFileSystemReader(FileSystemReader):
    _reading: Any = None  # the storage info of the blob stock DCP sliced last (`_slice_file`)
    _keys: dict[int, str] | None = None  # each storage info's key, by the info's id

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = load_metadata(f"{self.path}/{DCP_METADATA_FILE}")
        store = LocalByteStore(self.path)
        storage = metadata.storage_data if isinstance(metadata.storage_data, dict) else {}
        for info in storage.values():
            store.size(
                str(getattr(info, "relative_path", ""))
            )  # refuses escapes and non-regular files
        storage_meta = getattr(metadata, "storage_meta", None)
        if storage_meta is None:
            storage_meta = metadata.storage_meta = StorageMeta()
        storage_meta.load_id = self.load_id
        self._declared = metadata.state_dict_metadata
        return metadata

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Stock DCP, after every blob the plan reads passed blob_guard's checks (stock DCP
        hands each blob straight to torch.load, whose zip reader and unpickler bound nothing)."""
        store = LocalByteStore(self.path)
        for item in plan.items:
            info = self.storage_data[item.storage_index]
            where = f"{self.path}/{info.relative_path} [{item.storage_index.fqn}]"
            if info.transform_descriptors:
                raw = store.read_range(info.relative_path, info.offset, info.length)
                decoded = decode_blob(
                    raw, tuple(info.transform_descriptors), where, self._decoded_limit(item)
                )
                check_blob(decoded, len(decoded.getbuffer()), where)
            else:
                check_blob(
                    RangeFile(store, info.relative_path, info.offset, info.length),
                    info.length,
                    where,
                )
        self._reading, self._keys = None, None  # this load's storage infos, told apart anew
        if isinstance(planner, SafeLoadPlanner):
            planner.where_read = self._blob_read
        try:
            return super().read_data(plan, planner)
        except CheckpointFormatError:
            raise
        except Exception as err:  # torch.load of a tensor: its refusal is a page of advice
            reraise_if_out_of_memory(err)  # the machine's limit, not the blob's fault
            if not is_torch_refusal(err):
                raise
            raise CheckpointFormatError(
                f"{self._blob_read()}: {torch_load_reason(err, DETAIL_CHARS)}"
            ) from None

    def _slice_file(self, file: Any, sinfo: Any) -> Any:
        """Stock DCP's view of one blob, remembered: the blob torch.load reads next, named
        if it refuses it."""
        self._reading = sinfo
        return super()._slice_file(file, sinfo)

    def _blob_read(self) -> str:
        """`file [key]` of the blob stock DCP read last, else the checkpoint directory."""
        if self._reading is None:
            return str(self.path)
        if self._keys is None:  # built once a load: a planner asks for each blob it loads
            self._keys = {id(info): index.fqn for index, info in self.storage_data.items()}
        key = self._keys.get(id(self._reading))
        if key is None:
            return str(self.path)
        return f"{self.path}/{self._reading.relative_path} [{key}]"

    def _decoded_limit(self, item: Any) -> int:
        """Bytes a transformed blob may decode to: its chunk's, or MAX_OBJECT_BYTES for objects."""
        entry = getattr(self, "_declared", {}).get(item.storage_index.fqn)
        if entry is None:
            return MAX_OBJECT_BYTES
        for chunk in getattr(entry, "chunks", ()):
            if tuple(chunk.offsets) == tuple(item.storage_index.offset or ()):
                return math.prod(chunk.sizes) * entry.properties.dtype.itemsize + BLOB_OVERHEAD
        return MAX_OBJECT_BYTES


class SafeLoadPlanner(DefaultLoadPlanner):
    # `file [key]` of the blob being loaded, told by the SafeFileSystemReader reading it: a
    # refusal names the file as validate's line on the same blob does (the key alone left
    # a resume's user to search every .distcp for it)
    where_read: Callable[[], str] | None = None

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        where = self.where_read() if self.where_read is not None else fqn
        check_blob(value, len(value.getbuffer()), where)
        try:
            loaded = torch.load(value, map_location="cpu", weights_only=True)
        except Exception as err:  # torch's refusal is a page advising an unsafe load
            reraise_if_out_of_memory(err)  # the machine's limit, not the blob's fault
            raise CheckpointFormatError(
                f"{where}: {torch_load_reason(err, DETAIL_CHARS)}"
            ) from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded
