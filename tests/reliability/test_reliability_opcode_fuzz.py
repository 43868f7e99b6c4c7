"""Opcode-level fuzzing of the two pickle readers a checkpoint feeds: `.metadata` and the
`data.pkl` inside each tensor blob.

Byte flips (tests/reliability/test_reliability_fuzz.py) mostly break a pickle at its first opcode.
Here a real pickle is cut into its opcodes and mutated as a program: opcodes deleted,
repeated, swapped, and new ones inserted from a vocabulary of what attacks use (BUILD,
SETITEM(S), APPEND(S) after admitted globals, NEWOBJ/REDUCE, memo indices near 2**31,
floods, refused opcodes, forbidden globals, bogus frames). Each case must parse or raise
one of the library's documented errors; nothing else may escape, the process-wide dtype
table must be unchanged afterwards, and the whole run stays under an address-space
limit (soft RLIMIT_AS: the process's size + 1.5 GiB) and a time limit (SIGALRM).
"""

from __future__ import annotations

import contextlib
import io
import pickle
import pickletools
import resource
import signal
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import dtypes, layout
from mfsdp_ckpt.format.dcp_metadata import UnsafeMetadataError
from mfsdp_ckpt.storage.blob_decode import load_blob
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.chunk_checks import chunk_coverage_problems
from mfsdp_ckpt.storage.reader import CheckpointFormatError, CheckpointReader
from tests.reliability.memory_store import MemoryStore

DOCUMENTED = (UnsafeMetadataError, CheckpointFormatError, CheckpointFileError)
EXAMPLES = {"metadata": 1000, "blob": 800}
LIMIT_BYTES = 3 << 29  # 1.5 GiB above the process
TIME_LIMIT_S = 240


@contextlib.contextmanager
def limited():
    """Soft RLIMIT_AS at the current size + LIMIT_BYTES, and SIGALRM after TIME_LIMIT_S."""
    size = int(Path("/proc/self/status").read_text().split("VmSize:")[1].split()[0]) * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)

    def alarm(*_):
        raise TimeoutError(f"fuzzing ran over {TIME_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    resource.setrlimit(resource.RLIMIT_AS, (size + LIMIT_BYTES, hard))
    signal.alarm(TIME_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def fingerprint() -> list:
    return [sorted(vars(d).items()) for d in dtypes.BY_NAME.values()] + [sorted(dtypes.BY_STORAGE)]


def spans(data: bytes) -> list[bytes]:
    """The pickle cut at opcode boundaries: one bytes object per opcode with its argument."""
    starts = [position for _op, _arg, position in pickletools.genops(data)]
    return [data[a:b] for a, b in zip(starts, starts[1:] + [len(data)])]


def _global(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


VOCABULARY = [
    b"b",
    b"s",
    b"u",
    b"a",
    b"e",
    b"}",
    b"]",
    b")",
    b"(",
    b"0",
    b"1",
    b"2",
    b"N",
    b"\x81",
    b"R",
    b"t",
    b"\x85",
    b"\x86",
    b"\x87",
    b"\x88",
    b"\x89",
    b".",
    b"l",
    b"d",
    b"h\x00",
    b"h\x07",
    b"j" + struct.pack("<I", 0x7FFFFFFF),
    b"q\xff",
    b"r" + struct.pack("<I", 0x10000000),
    b"\x94",
    b"K\xff",
    b"J" + struct.pack("<i", -5),
    b"\x8a\x09" + b"\xff" * 9,
    b"\x8b\x00\x00\x10\x00",
    b"\x8c\x03abc",
    b"X\x00\x00\x00\x80",
    b"\x95" + struct.pack("<Q", 1 << 40),
    _global("torch", "float32"),
    _global("torch", "FloatStorage"),
    _global("torch", "Size"),
    _global("collections", "OrderedDict"),
    _global("torch.distributed.checkpoint.metadata", "MetadataIndex"),
    _global("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"),
    _global("torch._utils", "_rebuild_tensor_v2"),
    _global("os", "system"),
    _global("builtins", "getattr"),
    b"\x8f",
    b"\x90",
    b"\x91",
    b"\x82\x01",
    b"Pid\n",
    b"Q",
    b"i__main__\nX\n",
    b"o",
    b"\x97",
    b"\x98",
    b"}" * 64,
    b"(" * 64,
    b")" + b"\x85" * 64,
    # gadgets: a whole mutation of an admitted object, stack left balanced (POP)
    _global("torch", "float32") + b"}\x8c\x0bsafetensors\x8c\x03I32sb0",
    _global("torch", "int8") + b"N}\x8c\x08itemsizeK\x04s\x86b0",
    _global("collections", "OrderedDict") + b"\x8c\x01kNs0",
    _global("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING")
    + b"K\x00\x85R}\x8c\x01xNsb0",
]


@st.composite
def mutated(draw, base: bytes) -> bytes:
    pieces = spans(base)
    for _ in range(draw(st.integers(1, 4))):
        if not pieces:
            break
        at = draw(st.integers(0, len(pieces) - 1))
        how = draw(st.sampled_from(["delete", "repeat", "swap", "insert", "insert", "replace"]))
        if how == "delete":
            del pieces[at]
        elif how == "repeat":
            pieces[at:at] = [pieces[at]] * draw(st.integers(1, 3))
        elif how == "swap" and at + 1 < len(pieces):
            pieces[at], pieces[at + 1] = pieces[at + 1], pieces[at]
        elif how == "insert":
            pieces.insert(at, draw(st.sampled_from(VOCABULARY)))
        else:
            pieces[at] = draw(st.sampled_from(VOCABULARY))
    return b"".join(pieces)


def fuzz(name: str, base: bytes, read: Callable[[bytes], None]) -> None:
    """Feed `read` EXAMPLES[name] opcode mutations of the pickle `base`, within `limited()`:
    each must parse or raise a DOCUMENTED error and leave the dtype table as it was. Over half
    must be refused and some must parse, or the mutations did not exercise the reader."""
    before, seen = fingerprint(), {"parsed": 0, "refused": 0}

    @settings(
        max_examples=EXAMPLES[name],
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=mutated(base))
    def case(data):
        try:
            read(data)
            seen["parsed"] += 1
        except DOCUMENTED:
            seen["refused"] += 1
        assert fingerprint() == before

    with limited():
        case()
    assert seen["refused"] > EXAMPLES[name] // 2 and seen["parsed"] > 0, seen


@pytest.fixture(scope="module")
def checkpoint_files(tmp_path_factory) -> dict[str, bytes]:
    run = tmp_path_factory.mktemp("opfuzz") / "run"
    model = {
        "w": torch.randn(6, 4),
        "b": torch.arange(4, dtype=torch.int64),
        "h": torch.randn(3).half(),
    }
    Checkpointer(run, strategy="none").save(
        1, {"model": model, "extra": {"step": 1}}, contents=("model", "extra")
    )
    dist = layout.step_dir(run, 1) / layout.DIST_CKPT_DIR
    return {p.name: p.read_bytes() for p in dist.iterdir()}


def read_everything(files: dict[str, bytes]) -> None:
    reader = CheckpointReader("<memory>", store=MemoryStore(files))
    reader.files()
    for entry in reader.tensors.values():
        if not chunk_coverage_problems(entry):
            reader.read_tensor(entry.name)
            for chunk in entry.chunks:
                reader.raw_payload_offset(entry, chunk)
    for name in reader.objects:
        reader.read_object(name)


@pytest.mark.parametrize("protocol", [2, 4])
def test_metadata_opcode_mutations(checkpoint_files, protocol):
    from tests.support.metadata_reads import load_metadata_bytes

    base = pickle.dumps(
        load_metadata_bytes(checkpoint_files[layout.DCP_METADATA_FILE]), protocol=protocol
    )
    fuzz(
        "metadata",
        base,
        lambda data: read_everything(dict(checkpoint_files, **{layout.DCP_METADATA_FILE: data})),
    )


def _blob_checkpoint(blob: bytes) -> dict[str, bytes]:
    """A one-tensor checkpoint (float32 4x4) whose only chunk is `blob`."""
    properties = TensorProperties(dtype=torch.float32)
    chunk = ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([4, 4]))
    metadata = Metadata(
        {"w": TensorStorageMetadata(properties, torch.Size([4, 4]), [chunk])},
        storage_data={MetadataIndex("w", chunk.offsets): _StorageInfo("b.distcp", 0, len(blob))},
    )
    return {layout.DCP_METADATA_FILE: pickle.dumps(metadata), "b.distcp": blob}


def _tensor_blob() -> tuple[bytes, str, bytes]:
    import zipfile

    buffer = io.BytesIO()
    torch.save(torch.randn(4, 4), buffer)
    archive = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    name = next(n for n in archive.namelist() if n.endswith("data.pkl"))
    return buffer.getvalue(), name, archive.read(name)


def _with_pickle(blob: bytes, member: str, data: bytes) -> bytes:
    import zipfile

    source, out = zipfile.ZipFile(io.BytesIO(blob)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(
                zipfile.ZipInfo(info.filename),
                data if info.filename == member else source.read(info),
            )
    return out.getvalue()


def test_blob_pickle_opcode_mutations():
    blob, member, base = _tensor_blob()

    def read(data: bytes) -> None:
        mutated_blob = _with_pickle(blob, member, data)
        read_everything(_blob_checkpoint(mutated_blob))
        load_blob(mutated_blob, (), "<blob>")

    fuzz("blob", base, read)
