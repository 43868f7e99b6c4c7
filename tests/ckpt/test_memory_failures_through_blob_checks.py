"""Memory running out while a blob's transforms or layout are checked is the machine's
failure, raised whole (the CLI's out-of-memory line), never a reason about the checkpoint:
`undecodable_transforms` returned "cannot decode transforms ...: MemoryError" and cached it,
so every later check of those transforms said it too; the layout read behind
`raw_payload_offset` took it for "not the plain layout" and went on without a word.

The failures are real: an allocation no machine can make (`bytearray(1 << 62)`), reached
from inside the call a blob check makes."""

from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.saved_objects import TENSOR_LAYOUT_GLOBALS
from mfsdp_ckpt.storage.blob_decode import decode_blob, load_blob, undecodable_transforms
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.tensor_memory import memory_failure

TRANSFORM = "stream.zstd/1"  # DCP's name for its zstd stream transform
REBUILD = ("torch._utils", "_rebuild_tensor_v2")  # what a saved tensor's pickle calls


class _NameNeedingMemory(str):
    """A transform name whose parsing allocates more than any machine has."""

    def partition(self, sep: str) -> tuple[str, str, str]:  # type: ignore[override]
        return bytearray(1 << 62), sep, ""  # type: ignore[return-value]


class _NameOfAFailingCodec(str):
    """A transform name whose parsing fails as a codec does that ran out of memory: its own
    error, raised from the MemoryError."""

    def partition(self, sep: str) -> tuple[str, str, str]:  # type: ignore[override]
        try:
            bytearray(1 << 62)
        except MemoryError as err:
            raise ValueError("codec could not allocate its window") from err
        raise AssertionError("a 4 EiB allocation succeeded")


def test_memory_running_out_is_raised_and_never_cached_as_the_transforms_fault():
    undecodable_transforms.cache_clear()
    with pytest.raises(MemoryError):
        undecodable_transforms((_NameNeedingMemory(TRANSFORM),))
    said = undecodable_transforms((TRANSFORM,))  # the same key, with memory to spare
    assert said == undecodable_transforms.__wrapped__((TRANSFORM,))
    assert said is None or "MemoryError" not in said


@pytest.mark.parametrize("decode", [decode_blob, load_blob], ids=["decode_blob", "load_blob"])
def test_a_codec_error_raised_from_memory_running_out_is_not_the_blobs_fault(decode):
    with pytest.raises(Exception) as failed:
        decode(b"blob", (_NameOfAFailingCodec(TRANSFORM),), "ckpt/__0_0.distcp [w]")
    assert not isinstance(failed.value, CheckpointFormatError)
    assert isinstance(memory_failure(failed.value), MemoryError)


def _rebuild_needing_memory(*args: object) -> object:
    return bytearray(1 << 62)


def test_memory_running_out_reading_a_blobs_layout_is_raised(tmp_path, monkeypatch):
    dcp.save({"w": torch.ones(4)}, checkpoint_id=str(tmp_path), no_dist=True)
    reader = CheckpointReader(tmp_path)
    entry = reader.tensors["w"]
    assert reader.raw_payload_offset(entry, entry.chunks[0]) is not None  # the plain layout
    monkeypatch.setitem(TENSOR_LAYOUT_GLOBALS, REBUILD, _rebuild_needing_memory)
    with pytest.raises(MemoryError):
        reader.raw_payload_offset(entry, entry.chunks[0])
