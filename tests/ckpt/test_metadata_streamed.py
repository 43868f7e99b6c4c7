"""`.metadata` pickled straight into its file is byte for byte the in-memory pickle, and its
pickler's memo keeps only what a later `GET` can need."""

import gc
import tracemalloc

import torch.distributed.checkpoint as dcp
import xxhash

from mfsdp_ckpt.format import dcp_metadata
from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.format.torch_save_format import Size, dump_metadata, tensor_metadata
from mfsdp_ckpt.storage import metadata_stream

TENSORS = 1200  # some 30k memo entries: the memo is swept many times


def _metadata(tensors: int) -> dcp_metadata.Metadata:
    """As StreamingDcpWriter builds it: each key in three places, an alias holding its
    target's size, a non-tensor value, every entry in one of two files."""
    entries, planner, storage = {}, {}, {}
    for index in range(tensors):
        key = f"model.layers.{index}.weight"
        entries[key] = tensor_metadata(BY_NAME["bfloat16" if index % 2 else "float32"], (4, 2))
        planner[key] = ("model", f"layers.{index}.weight")
        name = f"__0_{index % 2}.distcp"
        storage[dcp_metadata.MetadataIndex(key, Size([0, 0]))] = dcp_metadata.StorageInfo(
            name, 100 * index, 90
        )
    target = entries["model.layers.0.weight"]
    entries["model.head"] = tensor_metadata(target.properties.dtype, target.size)
    planner["model.head"] = ("model", "head")
    storage[dcp_metadata.MetadataIndex("model.head", Size([0, 0]))] = dcp_metadata.StorageInfo(
        "__0_0.distcp", 0, 90
    )
    entries["iteration"] = dcp_metadata.BytesStorageMetadata()
    planner["iteration"] = ("iteration",)
    storage[dcp_metadata.MetadataIndex("iteration", None)] = dcp_metadata.StorageInfo(
        "__0_1.distcp", 7, 3
    )
    return dcp_metadata.Metadata(
        state_dict_metadata=entries,
        planner_data=planner,
        storage_data=storage,
        storage_meta=dcp_metadata.StorageMeta(save_id="fixed"),
        version="1.0.0",
    )


def test_streamed_bytes_are_the_in_memory_pickle_and_torch_reads_them(tmp_path):
    metadata = _metadata(TENSORS)
    path = tmp_path / ".metadata"
    record = metadata_stream.write_metadata(metadata, path, hashed=True)
    data = path.read_bytes()
    assert data == dump_metadata(metadata)
    assert record is not None and record.size == len(data)
    assert record.digest == xxhash.xxh3_128_hexdigest(data)
    loaded = dcp.FileSystemReader(str(tmp_path)).read_metadata()
    assert len(loaded.state_dict_metadata) == TENSORS + 2
    head = loaded.state_dict_metadata["model.head"]
    assert head.size == loaded.state_dict_metadata["model.layers.0.weight"].size
    assert loaded.planner_data["model.layers.7.weight"] == ("model", "layers.7.weight")


def test_memo_keeps_no_entry_or_temporary(tmp_path, monkeypatch):
    """What the memo still holds at the end: per tensor its key, path and file name strings,
    its sizes and planner tuple, nothing an entry's reducers built; and the streamed dump's
    peak is a fraction of the in-memory one's."""
    kept: list[int] = []
    dump = metadata_stream._LeanPickler.dump

    def dump_and_count(self, obj):
        dump(self, obj)
        self._sweep()
        kept.append(len(self.memo))

    monkeypatch.setattr(metadata_stream._LeanPickler, "dump", dump_and_count)
    metadata = _metadata(TENSORS)
    metadata_stream.write_metadata(metadata, tmp_path / ".metadata", hashed=False)
    assert kept[0] < 8 * TENSORS  # about 25 a tensor without the sweep
    gc.collect()
    tracemalloc.start()
    try:
        metadata_stream.write_metadata(metadata, tmp_path / ".metadata", hashed=False)
        streamed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        dump_metadata(metadata)
        in_memory = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (streamed - metadata_stream._BUFFER_BYTES) * 2 < in_memory
