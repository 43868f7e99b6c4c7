"""DCP reader and planner for `dcp.load` that never unpickle untrusted bytes.

Stock DCP unpickles `.metadata` with `pickle.load` and loads non-tensor items with
`torch.load(weights_only=False)`: resuming from a crafted checkpoint would run its code.
These overrides swap in the allow-listed metadata loader, blob_guard's structure checks
before each blob is loaded, and weights-only loading;
the reader also refuses file names that leave the checkpoint directory (`../x`, absolute
paths, symlinks pointing out), which stock DCP would follow. Stock DCP copies each loaded
blob into its parameter (`copy_`), casting whatever dtype it holds: so every tensor blob a
load reads is first checked against `.metadata`'s dtype and chunk shape, by the reader's
own check (`reader.stored_layout`, the one validate --deep and export run), before any
weight is overwritten; and each region loaded is checked for NaN/Inf, which a resume
would otherwise report a step later as a NaN gradient. Everything else is stock DCP, so
resharding across world sizes works unchanged.
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
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.futures import Future

from mfsdp_ckpt.check.printable import is_torch_refusal, torch_load_reason
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.blob_guard import check_blob
from mfsdp_ckpt.format.dcp_metadata import load_metadata
from mfsdp_ckpt.format.dtypes import BY_NAME, DType
from mfsdp_ckpt.format.finite import count_nan_tensor, count_nonfinite_tensor
from mfsdp_ckpt.format.layout import DCP_METADATA_FILE
from mfsdp_ckpt.format.restricted_pickle import DETAIL_CHARS
from mfsdp_ckpt.storage.blob_decode import BLOB_OVERHEAD, MAX_OBJECT_BYTES, decode_blob, load_blob
from mfsdp_ckpt.storage.byte_store import LocalByteStore, RangeFile
from mfsdp_ckpt.storage.reader import check_loaded_chunk, stored_layout
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
        hands each blob straight to torch.load, whose zip reader and unpickler bound nothing)
        and every tensor blob holds the dtype and shape `.metadata` gives its chunk: all
        are checked before the first is copied into a weight."""
        store = LocalByteStore(self.path)
        for item in plan.items:
            info = self.storage_data[item.storage_index]
            where = f"{self.path}/{info.relative_path} [{item.storage_index.fqn}]"
            transforms = tuple(info.transform_descriptors or ())
            if transforms:
                raw = store.read_range(info.relative_path, info.offset, info.length)
                blob: Any = decode_blob(raw, transforms, where, self._decoded_limit(item))
                length = len(blob.getbuffer())
            else:
                blob = RangeFile(store, info.relative_path, info.offset, info.length)
                length = info.length
            declared = self._declared_chunk(item) if item.type != LoadItemType.BYTE_IO else None
            if declared is None:
                check_blob(blob, length, where)
            elif stored_layout(blob, length, *declared, where) is None:
                # not the plain one-tensor pickle: what torch.load makes of it is checked
                raw = store.read_range(info.relative_path, info.offset, info.length)
                limit = math.prod(declared[1]) * declared[0].itemsize + BLOB_OVERHEAD
                check_loaded_chunk(load_blob(raw, transforms, where, limit), *declared, where)
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

    def _decoded_limit(self, item: ReadItem) -> int:
        """Bytes a transformed blob may decode to: its chunk's, or MAX_OBJECT_BYTES for objects."""
        declared = self._declared_chunk(item)
        if declared is None:
            return MAX_OBJECT_BYTES
        dtype, sizes = declared
        return math.prod(sizes) * dtype.itemsize + BLOB_OVERHEAD

    def _declared_chunk(self, item: ReadItem) -> tuple[DType, tuple[int, ...]] | None:
        """(dtype, chunk shape) `.metadata` gives the tensor chunk `item` reads; None for an
        object entry. A dtype mfsdp has no record of is refused naming the key."""
        fqn = item.storage_index.fqn
        entry = getattr(self, "_declared", {}).get(fqn)
        if entry is None:
            return None
        for chunk in getattr(entry, "chunks", ()):
            if tuple(chunk.offsets) == tuple(item.storage_index.offset or ()):
                stated = entry.properties.dtype
                dtype = BY_NAME.get(str(stated).removeprefix("torch."))
                if dtype is None:
                    raise CheckpointFormatError(f"{self.path} [{fqn}]: unknown dtype {stated}")
                return dtype, tuple(chunk.sizes)
        return None


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

    def commit_tensor(self, read_item: ReadItem, tensor: torch.Tensor) -> None:
        """Stock DCP, once the region just loaded holds no NaN/Inf (one pass over it):
        non-finite stored weights are refused here, naming their file and key as validate
        --deep does, not blamed on the first step's gradient after the run dir is written."""
        nonfinite = count_nonfinite_tensor(tensor)
        if nonfinite:
            where = self.where_read() if self.where_read is not None else read_item.dest_index.fqn
            nans = count_nan_tensor(tensor)
            raise CheckpointFormatError(f"{where}: {nans} NaN and {nonfinite - nans} Inf values")
        super().commit_tensor(read_item, tensor)
