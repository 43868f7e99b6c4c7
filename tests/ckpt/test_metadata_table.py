"""The writer holds each item of `.metadata` as a few ints and shared objects until it is
written (`metadata_table`), builds DCP's dataclasses one item at a time while pickling,
and lets go of each once written; the bytes are those of the `Metadata` it used to hold."""

import tracemalloc

import torch
import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.format import dcp_metadata
from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.format.torch_save_format import Size, dump_metadata, tensor_metadata
from mfsdp_ckpt.storage import metadata_stream
from mfsdp_ckpt.storage.dcp_stream_writer import StreamingDcpWriter
from mfsdp_ckpt.storage.metadata_table import MetadataTable

TENSORS = 1100  # past a pickler batch of 1000, some 13k memo entries: swept several times
DTYPES = [BY_NAME[name] for name in ("bfloat16", "float32", "int64")]


def _path(*parts: str) -> tuple[str, ...]:
    """A path of parts no other path shares, as import-hf builds them (each call makes its
    "model" anew): a part shared between paths is pickled once, then referenced."""
    return tuple("".join([part, "."])[:-1] for part in parts)


def _items() -> list[tuple[tuple[str, ...], object]]:
    """(path, what is added there): a tensor's (dtype, shape), ("alias", path) or
    ("object", value)."""
    items: list[tuple[tuple[str, ...], object]] = []
    for index in range(TENSORS):
        shape = (index % 3 + 1,) * (index % 4)  # scalars included
        items.append((_path("model", f"layers.{index}.weight"), (DTYPES[index % 3], shape)))
    items.append((_path("model", "output", "weight"), (DTYPES[1], (4, 2))))
    items.append((_path("model", "head"), ("alias", items[5][0])))
    items.append((_path("iteration"), ("object", 7)))
    return items


def _write(items, root) -> None:
    writer = StreamingDcpWriter(root, threads=2)
    for path, what in items:
        if what[0] == "alias":
            writer.add_alias(path, what[1])
        elif what[0] == "object":
            writer.add_object(path, what[1])
        else:
            dtype, shape = what
            nbytes = dtype.itemsize * int(torch.Size(shape).numel())
            writer.add_raw(path, dtype, shape, memoryview(bytes(range(256)) * 4)[:nbytes])
    writer.finish()


def _eager(items, written: dcp_metadata.Metadata) -> dcp_metadata.Metadata:
    """The `Metadata` of `items` as the writer held it before: each entry's dataclasses
    made when it was added, placed where `written` says."""
    places = {index.fqn: info for index, info in written.storage_data.items()}
    names: dict[str, str] = {}  # one object per file name, as the writer's
    entries, planner, storage = {}, {}, {}
    for path, what in items:
        key = ".".join(path)
        planner[key] = path
        if what[0] == "object":
            entries[key], offsets = dcp_metadata.BytesStorageMetadata(), None
        else:
            source = entries[".".join(what[1])] if what[0] == "alias" else None
            dtype, shape = (source.properties.dtype, source.size) if source else what
            entries[key], offsets = tensor_metadata(dtype, shape), Size([0] * len(shape))
        info = places[key]
        name = names.setdefault(info.relative_path, info.relative_path)
        index = dcp_metadata.MetadataIndex(key, offsets)
        storage[index] = dcp_metadata.StorageInfo(name, info.offset, info.length)
    return dcp_metadata.Metadata(
        state_dict_metadata=entries,
        planner_data=planner,
        storage_data=storage,
        storage_meta=dcp_metadata.StorageMeta(save_id=written.storage_meta.save_id),
        version=written.version,
    )


def test_streamed_metadata_is_the_eager_pickle_and_dcp_loads_it(tmp_path):
    items = _items()
    _write(items, tmp_path / "ckpt")
    data = (tmp_path / "ckpt" / ".metadata").read_bytes()
    written = dcp_metadata.load_plain_metadata_bytes(data)
    assert len(written.state_dict_metadata) == len(items)
    assert data == dump_metadata(_eager(items, written))
    state = {"model": {"head": torch.zeros(3, dtype=torch.int64)}, "iteration": 0}
    state["model"]["layers.5.weight"] = torch.zeros(3, dtype=torch.int64)
    dcp.load(state, checkpoint_id=tmp_path / "ckpt")
    expected = torch.frombuffer(bytearray(range(24)), dtype=torch.int64)
    assert torch.equal(state["model"]["layers.5.weight"], expected)
    assert torch.equal(state["model"]["head"], expected) and state["iteration"] == 7


def test_table_holds_a_fraction_of_the_dataclasses():
    """Per tensor, the table (keys apart, which both hold) against the dataclasses the
    writer held before, paths apart too (the caller's, before)."""
    paths = [_path("model", f"layers.{index % 4}.experts.{index}.w") for index in range(5000)]
    keys = [".".join(path) for path in paths]
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        table = MetadataTable()
        for index, (key, path) in enumerate(zip(keys, paths)):
            table.add(key, path, (DTYPES[0], (4, 8)), "__0_0.distcp", 10**9 + 900 * index, 800)
        compact = tracemalloc.get_traced_memory()[0] - base
        del table
        base = tracemalloc.get_traced_memory()[0]
        entries, storage = {}, {}
        for index, key in enumerate(keys):
            entries[key] = tensor_metadata(DTYPES[0], (4, 8))
            info = dcp_metadata.StorageInfo("__0_0.distcp", 10**9 + 900 * index, 800)
            storage[dcp_metadata.MetadataIndex(key, Size([0, 0]))] = info
        planner = dict(zip(keys, paths))
        eager = tracemalloc.get_traced_memory()[0] - base
        del entries, storage, planner
    finally:
        tracemalloc.stop()
    assert compact * 4 < eager


def test_each_streamed_entry_is_let_go_once_written(tmp_path, monkeypatch):
    """At the end the memo holds no entry, size or storage record: per tensor only its
    key (named again by the later tables), while the eager `Metadata` kept every size."""
    held: list[list[object]] = []
    dump = metadata_stream._LeanPickler.dump

    def dump_and_keep(self, obj):
        dump(self, obj)
        self._sweep()
        held.append([entry[1] for entry in self.memo.values()])

    monkeypatch.setattr(metadata_stream._LeanPickler, "dump", dump_and_keep)
    items = [item for item in _items() if item[1][0] not in ("alias", "object")]
    _write(items, tmp_path / "ckpt")
    kinds = (Size, dcp_metadata.MetadataIndex, dcp_metadata.StorageInfo, tuple)
    left = [obj for obj in held[0] if isinstance(obj, kinds)]
    assert len(left) < 8, left[:8]  # the last entry's, in use at its sweep
    keys = {".".join(path) for path, _ in items}
    assert sum(isinstance(obj, str) and obj in keys for obj in held[0]) == len(items)
