"""What DCP's `.metadata` says of each item written, held compactly until it is written.

`.metadata` is written after the last data byte, so whatever it says of an item is held
from that item's write to the end. Held as DCP's dataclasses (an entry, its properties, its
sizes and chunk list, a storage index and info, a planner path: about 1.2 KiB a tensor),
a mixture-of-experts model of 100k+ tensors held over a hundred megabytes of them, and
their pickling kept every size alive in the pickler's memo as well.

Here an item is its key, one row of int arrays (its file, its byte range) and a shared
`_Form`: dtype, shape and the lengths of its path's parts (the key is the parts joined by
dots), one object per distinct value, so the experts of a layer share one. The dataclasses
are built one item at a time while `.metadata` is written (`metadata_stream`'s
`StreamedDict`) and let go once pickled. Each is built fresh, as an eager `Metadata` holds
them; only the key, the file names and the dtypes are shared between places, as they are
there. So the pickle, its memo references included, is byte for byte that of the eager
`Metadata` (tests/ckpt/test_metadata_table.py). A path's parts are cut from its key anew:
a part a caller shares between paths (one string object) is then written in full each
time rather than referenced, the same values in a few more bytes; import-hf makes each
path's parts anew, so its `.metadata` is unchanged.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import Any, cast

from mfsdp_ckpt.format import dcp_metadata
from mfsdp_ckpt.format.dtypes import DType
from mfsdp_ckpt.format.torch_save_format import Size, tensor_metadata
from mfsdp_ckpt.storage.metadata_stream import StreamedDict

# dtype and shape (both None for a non-tensor value), the lengths of the path's parts but
# the last
_Form = tuple[DType | None, tuple[int, ...] | None, tuple[int, ...]]


class MetadataTable:
    """The items of one DCP checkpoint, in the order added; `metadata()` is their
    `Metadata`, each entry one whole chunk at offset 0, as a one-rank save records it."""

    def __init__(self) -> None:
        self._rows: dict[str, int] = {}  # key -> its row in the arrays below
        self._forms: list[_Form] = []
        self._distinct: dict[_Form, _Form] = {}
        self._file_names: list[str] = []
        self._file = array("H")  # index into _file_names
        self._start = array("q")
        self._length = array("q")

    def new_key(self, path: Sequence[str]) -> str:
        """The flat key of the nested `path` (DCP's flatten_state_dict joins it with dots);
        ValueError if an item was added under it."""
        key = ".".join(path)
        if key in self._rows:
            raise ValueError(f"{key}: written twice")
        return key

    def add(
        self,
        key: str,
        path: Sequence[str],
        tensor: tuple[DType, Sequence[int]] | None,
        file_name: str,
        start: int,
        length: int,
    ) -> None:
        """The item `key` (from `new_key(path)`), stored at [start, start + length) of
        `file_name`: a tensor of (dtype, shape), or a non-tensor value (None)."""
        dtype, shape = tensor if tensor is not None else (None, None)
        form = (dtype, None if shape is None else tuple(shape), tuple(len(p) for p in path[:-1]))
        if file_name not in self._file_names:
            self._file_names.append(file_name)
        self._rows[key] = len(self._forms)
        self._forms.append(self._distinct.setdefault(form, form))
        self._file.append(self._file_names.index(file_name))
        self._start.append(start)
        self._length.append(length)

    def add_alias(self, key: str, path: Sequence[str], source: str) -> None:
        """The tensor `key` (from `new_key(path)`) of the dtype and shape of the tensor
        `source`, whose stored bytes it names as its own."""
        row = self._rows[source]
        dtype, shape, _ = self._forms[row]
        if dtype is None or shape is None:
            raise ValueError(f"{source}: not a tensor")
        self.add(key, path, (dtype, shape), self._file_names[self._file[row]], *self._range(row))

    def is_tensor(self, key: str) -> bool:
        """Whether a tensor was added under `key`."""
        row = self._rows.get(key)
        return row is not None and self._forms[row][0] is not None

    def metadata(self, save_id: str, version: str) -> dcp_metadata.Metadata:
        """The `Metadata` of every item, its three tables made while it is pickled
        (`metadata_stream.write_metadata`, the one thing that reads them)."""
        return dcp_metadata.Metadata(
            state_dict_metadata=cast(Any, StreamedDict(self._entries)),
            planner_data=StreamedDict(self._planner_paths),
            storage_data=StreamedDict(self._storage),
            storage_meta=dcp_metadata.StorageMeta(save_id=save_id),
            version=version,
        )

    def _range(self, row: int) -> tuple[int, int]:
        return self._start[row], self._length[row]

    def _entries(self) -> Iterator[tuple[str, Any]]:
        for key, row in self._rows.items():
            dtype, shape, _ = self._forms[row]
            if dtype is None or shape is None:
                yield key, dcp_metadata.BytesStorageMetadata()
            else:
                yield key, tensor_metadata(dtype, shape)

    def _planner_paths(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        """Each key's nested path, its parts cut from the key (a one-part path is the key
        itself, as `".".join` returns it)."""
        for key, row in self._rows.items():
            lengths = self._forms[row][2]
            if not lengths:
                yield key, (key,)
                continue
            parts, at = [], 0
            for length in lengths:
                parts.append(key[at : at + length])
                at += length + 1
            parts.append(key[at:])
            yield key, tuple(parts)

    def _storage(self) -> Iterator[tuple[dcp_metadata.MetadataIndex, dcp_metadata.StorageInfo]]:
        for key, row in self._rows.items():
            shape = self._forms[row][1]
            offsets = None if shape is None else Size([0] * len(shape))
            info = dcp_metadata.StorageInfo(self._file_names[self._file[row]], *self._range(row))
            yield dcp_metadata.MetadataIndex(key, offsets), info
