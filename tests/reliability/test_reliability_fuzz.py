"""Fuzz the readers of untrusted checkpoint metadata: >= 10,000 cases, derandomized.

Every case must either parse or raise one of the library's documented errors
(UnsafeMetadataError, CheckpointFormatError, CheckpointFileError, ManifestError): any
other exception is a crash a hostile or damaged checkpoint could trigger. Inputs:
byte-mutated real `.metadata` pickles (read all the way through CheckpointReader and,
when they still parse, every tensor), generated pickles of the allowed DCP types holding
absurd values (negative, 2**70, wrong types, escaping paths), and mutated manifest JSON.
"""

from __future__ import annotations

import contextlib
import json
import pickle

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.filesystem import _StorageInfo

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.dcp_metadata import UnsafeMetadataError
from mfsdp_ckpt.format.manifest import Manifest, ManifestError
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.chunk_checks import chunk_coverage_problems
from mfsdp_ckpt.storage.reader import CheckpointFormatError, CheckpointReader
from tests.reliability.memory_store import MemoryStore

DOCUMENTED = (UnsafeMetadataError, CheckpointFormatError, CheckpointFileError)
CASES = {"metadata_bytes": 4000, "metadata_generated": 3000, "manifest": 4000}  # 11,000 in all
ran = {name: 0 for name in CASES}


def fuzz_settings(name: str):
    return settings(
        max_examples=CASES[name],
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture(scope="module")
def real_checkpoint(tmp_path_factory) -> tuple[dict[str, bytes], str]:
    """A small real DCP checkpoint (tensors of several ranks and dtypes, an object, a scalar)."""
    run = tmp_path_factory.mktemp("fuzz") / "run"
    model = {
        "w": torch.randn(6, 4),
        "b": torch.arange(4, dtype=torch.int64),
        "h": torch.randn(3).half(),
        "s": torch.tensor(2.5),
    }
    Checkpointer(run, strategy="none").save(
        1, {"model": model, "extra": {"step": 1}}, contents=("model", "extra")
    )
    step = layout.step_dir(run, 1)
    files = {p.name: p.read_bytes() for p in (step / layout.DIST_CKPT_DIR).iterdir()}
    return files, (step / layout.MANIFEST_FILE).read_text()


def read_everything(files: dict[str, bytes], pristine: CheckpointReader | None = None) -> None:
    """What validate and export do with metadata: parse, list files, check chunks, and read
    every tensor and object whose entry differs from the pristine checkpoint's (reading the
    unchanged ones again would only test torch.load, thousands of times)."""
    reader = CheckpointReader("<memory>", store=MemoryStore(files))
    reader.files()
    before = (pristine.tensors, pristine.objects) if pristine else ({}, {})
    for entry in reader.tensors.values():
        if entry != before[0].get(entry.name) and not chunk_coverage_problems(entry):
            reader.read_tensor(entry.name)
    for name, entry in reader.objects.items():
        if entry != before[1].get(name):
            reader.read_object(name)


def mutate(
    data: bytes, edits: list[tuple[int, int]], cut: int | None, insert: tuple[int, bytes] | None
) -> bytes:
    buffer = bytearray(data)
    for position, value in edits:
        buffer[position % len(buffer)] = value
    if insert is not None:
        position, blob = insert
        buffer[position % len(buffer) : position % len(buffer)] = blob
    if cut is not None:
        del buffer[cut % (len(buffer) + 1) :]
    return bytes(buffer)


EDITS = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=6)
CUT = st.none() | st.integers(0, 1 << 20)
INSERT = st.none() | st.tuples(st.integers(0, 1 << 20), st.binary(max_size=16))


def test_mutated_metadata_bytes(real_checkpoint):
    files, _ = real_checkpoint
    pristine = CheckpointReader("<memory>", store=MemoryStore(files))

    @fuzz_settings("metadata_bytes")
    @given(edits=EDITS, cut=CUT, insert=INSERT)
    def case(edits, cut, insert):
        ran["metadata_bytes"] += 1
        fuzzed = dict(files, **{".metadata": mutate(files[".metadata"], edits, cut, insert)})
        with contextlib.suppress(DOCUMENTED):
            read_everything(fuzzed, pristine)

    case()
    assert ran["metadata_bytes"] >= CASES["metadata_bytes"]


WILD_INT = st.one_of(
    st.integers(-3, 64), st.integers(-(2**70), 2**70), st.sampled_from([2**63 - 1, 2**63, 2**64])
)
WILD = st.one_of(WILD_INT, st.none(), st.text(max_size=8), st.floats(allow_nan=True), st.booleans())
DIMS = st.one_of(st.lists(WILD_INT, max_size=4).map(tuple), WILD)
NAMES = st.one_of(
    st.sampled_from(["__0_0.distcp", "../../etc/passwd", "/abs", "", "a\x00b", "missing.distcp"]),
    st.text(max_size=12),
)


def _object(cls, **fields):
    """An instance of an allowed DCP type with whatever field values (as a hostile pickle can
    hold)."""
    value = object.__new__(cls)
    value.__dict__.update(fields)
    return value


@st.composite
def hostile_metadata(draw) -> bytes:
    state, storage = {}, {}
    for key in draw(st.lists(st.one_of(st.text(max_size=10), WILD_INT), max_size=4)):
        if draw(st.booleans()):
            chunks = draw(
                st.one_of(
                    st.lists(
                        st.builds(
                            lambda o, s: _object(
                                dcp_metadata.ChunkStorageMetadata, offsets=o, sizes=s
                            ),
                            DIMS,
                            DIMS,
                        ),
                        max_size=3,
                    ),
                    WILD,
                )
            )
            properties = _object(
                dcp_metadata.TensorProperties,
                dtype=draw(
                    st.one_of(st.sampled_from([torch.float32, torch.bfloat16, torch.int8]), WILD)
                ),
            )
            state[key] = _object(
                dcp_metadata.TensorStorageMetadata,
                properties=properties,
                size=draw(DIMS),
                chunks=chunks,
            )
            for chunk in chunks if isinstance(chunks, list) else []:
                offsets = chunk.offsets if isinstance(chunk.offsets, tuple) else ()
                if all(isinstance(v, int) and 0 <= v < 2**63 for v in offsets):
                    index = dcp_metadata.MetadataIndex(str(key), torch.Size(offsets))
                    storage[index] = _object(
                        _StorageInfo,
                        relative_path=draw(NAMES),
                        offset=draw(WILD_INT),
                        length=draw(WILD_INT),
                        transform_descriptors=draw(st.none() | st.just(["zstd"])),
                    )
        else:
            state[key] = dcp_metadata.BytesStorageMetadata()
            storage[dcp_metadata.MetadataIndex(str(key))] = _object(
                _StorageInfo,
                relative_path=draw(NAMES),
                offset=draw(WILD_INT),
                length=draw(WILD_INT),
                transform_descriptors=None,
            )
    metadata = _object(
        dcp_metadata.Metadata,
        state_dict_metadata=draw(st.one_of(st.just(state), WILD)),
        planner_data=None,
        storage_data=draw(st.one_of(st.just(storage), WILD)),
        storage_meta=None,
    )
    return pickle.dumps(metadata)


def test_generated_metadata_with_absurd_values(real_checkpoint):
    files, _ = real_checkpoint

    @fuzz_settings("metadata_generated")
    @given(blob=hostile_metadata())
    def case(blob):
        ran["metadata_generated"] += 1
        with contextlib.suppress(DOCUMENTED):
            read_everything(dict(files, **{".metadata": blob}))

    case()
    assert ran["metadata_generated"] >= CASES["metadata_generated"]


JSON_VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), WILD_INT, st.floats(allow_nan=False), st.text(max_size=8)),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = [
    "format_version",
    "step",
    "world_size",
    "strategy",
    "contents",
    "files",
    "model_family",
    "versions",
    "created_at",
    "save_seconds",
    "info",
]


def test_mutated_manifests(real_checkpoint):
    _, manifest_text = real_checkpoint
    real = json.loads(manifest_text)
    file_name = next(iter(real["files"]))

    @fuzz_settings("manifest")
    @given(data=st.data())
    def case(data):
        ran["manifest"] += 1
        how = data.draw(st.sampled_from(["field", "file", "text"]))
        if how == "field":  # a real manifest with one field replaced by anything
            edited = dict(real, **{data.draw(st.sampled_from(FIELDS)): data.draw(JSON_VALUE)})
            text = json.dumps(edited)
        elif how == "file":  # a file record (or its name) replaced
            files = dict(real["files"])
            files[data.draw(st.one_of(NAMES, st.just(file_name)))] = data.draw(JSON_VALUE)
            text = json.dumps(dict(real, files=files))
        else:  # the text itself mutated: truncated, characters changed, huge numbers, deep nesting
            text = manifest_text
            for position, char in data.draw(
                st.lists(st.tuples(st.integers(0, 1 << 16), st.characters()), max_size=4)
            ):
                position %= len(text)
                text = text[:position] + char + text[position + 1 :]
            text = text[: data.draw(st.integers(0, len(text)))] + data.draw(
                st.sampled_from(["", "9" * 5000, "[" * 100000, "\ud800", "}"])
            )
        try:
            manifest = Manifest.from_json(text)
        except ManifestError:
            return
        assert isinstance(manifest.files, dict)

    case()
    assert ran["manifest"] >= CASES["manifest"]
