"""Hostile bytes inside checkpoint files, by class, each class as generated instances.

Every CLI case runs through `hostile_bytes.run_limited`: a fresh process whose address
space is capped at its size after imports + 1.5 GiB, each command stopped after 30 s of CPU
time. A case passes when the command refuses with one `error:` line (or validate's INVALID
verdict), exit 1 or 2, no exception escaping (MemoryError and TimeoutError included), in
bounded time and output; a case whose work grows with its input (100,000 missing files) is
held to the CPU time of the same case at a hundredth of the size, times a hundred: linear,
on a busy machine as on a quiet one. The classes:

1. unpickling that mutates process state: BUILD/SETITEM/APPEND on every admitted global
   of both class tables (in-process: nothing is allocated);
2. memory and time from small inputs: opcode floods against the memory budget (each
   charged at least what it retains), constructors called on one memoized argument, memo
   indices in `.metadata` and in blob pickles, sparse huge files, DEFLATE bombs, oversized
   zip directories, storages claiming more than their record, 40,000 chunks, 100,000
   missing files, long names; and a real `.metadata` past the old opcode limit, read;
3. special files (FIFO, /dev/zero, directory, link out) where `.metadata`, `manifest.json`
   or a shard belongs;
4. a tensor's declared bytes inconsistent with its blob (1 TiB over 1 KB; int bytes under a
   float dtype of the same or another size);
5. terminal injection through tensor names.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import pickle
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.format import dtypes, layout
from mfsdp_ckpt.format.dcp_metadata import (
    MAX_METADATA_BYTES,
    UnsafeMetadataError,
    allowed_classes,
    check_schema,
    load_plain_metadata_bytes,
    record_types,
)
from mfsdp_ckpt.format.restricted_pickle import (
    CONTAINER,
    MIN_BUDGET,
    MINIMUM,
    OPCODE_COST,
    TEXT_PER_BYTE,
    PickleRefused,
    RestrictedUnpickler,
    restricted_loads,
)
from tests.reliability.hostile_bytes import (
    dist_of,
    model_weight,
    replace_blob,
    rezip,
    run_limited,
    saved_tensor_blob,
    step_of,
)
from tests.support.ckpt_edits import edit_metadata, resealed, write_metadata
from tests.support.metadata_reads import load_metadata_bytes

MAX_SECONDS = 30  # any one command here; the slowest (an opcode flood at the limit) takes a few


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A one-process checkpoint of the tiny Qwen2 model, exportable (config in huggingface/)."""
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("limits")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"))
    return root / "run"


def copy_of(pristine: Path, scratch: Path, name: str) -> Path:
    run = scratch / name / "run"
    shutil.copytree(pristine, run, symlinks=True)
    return run


def assert_refused(
    record: dict,
    codes=(1, 2),
    fragment: str = "",
    max_output: int = 1 << 20,
    max_cpu_seconds: float | None = None,
) -> None:
    """Refused in one line (validate: findings, then its INVALID verdict), within limits:
    MAX_SECONDS of wall time, or `max_cpu_seconds` of CPU time where given (work measured
    against a calibrating case, not the machine's load)."""
    where = f"{record['args']}: {record['first']}"
    assert record["escaped"] is None, f"{record['escaped']} escaped: {where}"
    assert record["exit"] in codes, where
    assert not [e for e in record["errors"] if e.startswith("error: over ")], where  # stopped
    if max_cpu_seconds is None:
        assert record["seconds"] < MAX_SECONDS, where
    else:
        assert record["cpu_seconds"] <= max_cpu_seconds, f"{record['cpu_seconds']} s: {where}"
    assert record["output_bytes"] < max_output, where
    assert len(record["errors"]) == 1 or record["verdict"], where
    if fragment:  # output over 64 KiB comes back as its first lines only
        assert fragment in (record["output"] or "\n".join(record["first"])), where


# --------------------------------------------------------------------------- 1. mutation
def _admitted_globals() -> list[tuple[str, tuple[str, str]]]:
    return [
        (table, key)
        for table, classes in (("plain", allowed_classes("plain")), ("dcp", allowed_classes("dcp")))
        for key in classes
    ]


MUTATIONS = {  # what follows the global on the stack, then STOP
    "BUILD_dict": b"}X\x0b\x00\x00\x00safetensorsX\x03\x00\x00\x00I32sb",
    "BUILD_slots": b"N}X\x08\x00\x00\x00itemsizeK\x01s\x86b",
    "SETITEM": b"X\x01\x00\x00\x00kX\x01\x00\x00\x00vs",
    "SETITEMS": b"(X\x01\x00\x00\x00kX\x01\x00\x00\x00vu",
    "APPEND": b"Na",
    "APPENDS": b"(Ne",
}


def _fingerprint() -> list:
    """Everything a mutation could reach: every dtype record's fields and the tables."""
    return [sorted(vars(d).items()) for d in dtypes.BY_NAME.values()] + [
        sorted(dtypes.BY_NAME),
        sorted(dtypes.BY_STORAGE),
    ]


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_no_admitted_global_can_be_mutated(mutation):
    before = _fingerprint()
    refused = 0
    for table, (module, name) in _admitted_globals():
        data = b"\x80\x02c" + f"{module}\n{name}\n".encode() + MUTATIONS[mutation] + b"."
        load = load_plain_metadata_bytes if table == "plain" else load_metadata_bytes
        with pytest.raises(UnsafeMetadataError):
            load(data)
        refused += 1
    assert refused > 40
    assert _fingerprint() == before


def test_records_are_fresh_built_once_and_frozen(pristine):
    records = b"ctorch.distributed.checkpoint.metadata\nBytesStorageMetadata\n"
    enum = b"ctorch.distributed.checkpoint.metadata\n_MEM_FORMAT_ENCODING\nK\x00\x85R"
    for data, why in [
        (b"\x80\x02" + records + b")\x81}b}b.", "built twice"),
        (b"\x80\x02" + records + b")\x81}X\x01\x00\x00\x00xK\x01sb.", "a field it does not have"),
        (b"\x80\x02" + enum + b"}X\x05\x00\x00\x00valueK\x07sb.", "an enum member (shared)"),
    ]:
        with pytest.raises(UnsafeMetadataError, match="BUILD"):
            load_plain_metadata_bytes(data)
        assert why
    from mfsdp_ckpt.storage.reader import CheckpointReader

    reader = CheckpointReader(dist_of(pristine))
    entry = next(iter(reader.tensors.values()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        reader.metadata.state_dict_metadata[entry.name].properties.dtype = dtypes.BY_NAME["int32"]


# --------------------------------------------------------------------------- 2. bounds
def _flood(body: bytes, ops: int) -> bytes:
    return b"\x80\x02" + body * ops + b"."


FLOODS = {
    "EMPTY_DICT": b"}",
    "EMPTY_LIST": b"]",
    "MARK": b"(",
    "EMPTY_TUPLE": b")",
    "TUPLE1": b")\x85",
    "NEWOBJ": b"h\x00)\x81",
    "MEMOIZE": b"N\x94",
    "DUP": b"N2",
}
RECORD = b"ctorch.distributed.checkpoint.metadata\nBytesStorageMetadata\nq\x00"


@pytest.mark.parametrize("opcode", sorted(FLOODS))
@pytest.mark.parametrize("table", ["plain", "dcp"])
def test_every_opcode_counts_against_the_limit(opcode, table):
    """Each object-making opcode, flooded past a small budget, is refused by it (the
    full-size flood runs in test_hostile_sizes_...: seconds, so once)."""
    allowed = allowed_classes(table)
    data = b"\x80\x02" + RECORD + FLOODS[opcode] * 20_000 + b"."
    with pytest.raises(PickleRefused, match="would retain more than 64 KiB, the limit for a"):
        restricted_loads(data, allowed, record_types(allowed), budget=64 << 10)


def test_no_opcode_is_free():
    """Every opcode costs something, so the budget bounds the opcodes read (time), too."""
    assert len(OPCODE_COST) == 256 and min(OPCODE_COST) == MINIMUM > 0


def _pair(i: int) -> bytes:
    """A distinct int key and None."""
    return b"J" + struct.pack("<i", i) + b"N"


# 2/3 of 2**16 plus one: a dict of this many entries has just doubled its table (its worst fill)
PAST_RESIZE = 43_691
DIMS = b"(" + b"".join(b"\x8a\x08" + struct.pack("<q", 1 << 62) for _ in range(64)) + b"t"
RETENTION_FLOODS = {  # name -> (table, prefix, unit or unit(i), suffix)
    **{name: ("plain", RECORD, unit, b"") for name, unit in FLOODS.items()},
    "NEWOBJ+BUILD": ("plain", RECORD, b"h\x00)\x81}b", b""),
    "REDUCE record": (
        "dcp",
        b"ctorch.distributed.checkpoint.metadata\nMetadata\nq\x00",
        b"h\x00(NNNNNtR",
        b"",
    ),
    "LONG_BINPUT": ("plain", b"N", lambda i: b"r" + struct.pack("<I", i), b""),
    "SETITEM": ("plain", b"}", lambda i: _pair(i) + b"s", b""),
    "SETITEMS": ("plain", b"}(", _pair, b"u"),
    "SETITEMS OrderedDict": (
        "dcp",
        b"ccollections\nOrderedDict\n)R(",
        _pair,
        b"u",
    ),
    "REDUCE torch.Size": (
        "dcp",
        b"ctorch\nSize\nq\x00" + DIMS + b"q\x010",
        b"h\x00h\x01\x85R",
        b"",
    ),
    "REDUCE Path": (
        "plain",
        b"cpathlib\nPosixPath\nq\x00",
        lambda i: b"h\x00\x8c\x13" + f"{i:09x}/{i:09x}".encode() + b"\x85R",
        b"",
    ),
}


@pytest.mark.parametrize("flood", sorted(RETENTION_FLOODS))
def test_a_flood_allocates_no_more_than_it_is_charged(flood):
    """The cost table holds: each flood, stopped just past a dict's resize, allocates at most
    what the unpickler charged it (tracemalloc's peak; scripts/pickle_budget.py measures
    RSS too, in fresh processes)."""
    import tracemalloc

    table, prefix, unit, suffix = RETENTION_FLOODS[flood]
    body = (
        unit * PAST_RESIZE if isinstance(unit, bytes) else b"".join(map(unit, range(PAST_RESIZE)))
    )
    data = b"\x80\x02" + prefix + body + suffix + b"N."
    allowed = allowed_classes(table)
    reader = RestrictedUnpickler(data, allowed, record_types(allowed), budget=1 << 40)
    tracemalloc.start()
    try:
        reader.load()
        allocated = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0 < allocated <= reader.charged, (allocated, reader.charged)


def test_a_constructor_is_charged_for_the_argument_it_copies():
    """torch.Size called 100,000 times on one memoized 64-int tuple copies it each time
    (~60 MB from a 600 KB pickle): charged per item, it is refused at a 16 MiB budget."""
    data = b"\x80\x02ctorch\nSize\nq\x00" + DIMS + b"q\x010" + b"h\x00h\x01\x85R" * 100_000
    with pytest.raises(PickleRefused, match="would retain more than 16 MiB"):
        restricted_loads(data + b".", allowed_classes("dcp"), budget=16 << 20)


def test_a_call_argument_nested_a_million_deep_is_refused_before_it_is_hashed(tmp_path):
    """An Enum hashes its argument: a tuple nested 1,000,000 deep overflowed the C stack
    (a segfault). Run in a child process, so that a regression fails only this test."""
    import subprocess
    import sys

    from tests.support.paths import REPO

    path = tmp_path / "deep.pkl"
    path.write_bytes(
        b"\x80\x02ctorch.distributed.checkpoint.metadata\n_MEM_FORMAT_ENCODING\n)"
        + b"\x85" * 1_000_000
        + b"\x85R."
    )
    code = (
        "from mfsdp_ckpt.format.dcp_metadata import load_plain_metadata_bytes\n"
        "try:\n"
        f"    load_plain_metadata_bytes(open({str(path)!r}, 'rb').read())\n"
        "except Exception as err:\n"
        "    print(type(err).__name__, err)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert "UnsafeMetadataError" in done.stdout and "constructor argument" in done.stdout


def test_dict_keys_are_short_so_hashing_each_stays_cheap():
    """A key is hashed at every SETITEM: a memoized tuple of a million ints would cost a
    million steps each time. Keys have at most 64 items (a MetadataIndex offset's dims)."""
    key = b"(" + b"K\x01" * 65 + b"t"
    with pytest.raises(UnsafeMetadataError, match="dict key of type tuple"):
        load_plain_metadata_bytes(b"\x80\x02}" + key + b"Ns.")


@pytest.mark.parametrize(
    "key",
    [5 + (2**61 - 1), -(2**70), (1, 2), (0.5, 7)],
    ids=["int_past_the_hash_modulus", "huge_negative", "int_pair", "float_int"],
)
def test_dict_keys_whose_hashes_an_input_can_make_collide_are_refused(key):
    """Ints that differ by multiples of 2**61 - 1 share one hash, and tuples of numbers alone
    have hashes anyone can solve for: inserting N such keys takes time in N**2.
    A key's hash must come from the process's seed (str, bytes) or be the int itself."""
    data = pickle.dumps({key: None}, protocol=2)
    with pytest.raises(UnsafeMetadataError, match="could share its hash"):
        load_plain_metadata_bytes(data)


def test_dict_keys_of_names_small_ints_and_named_offsets_are_read():
    allowed = allowed_classes("plain")
    keys = ["model.x", b"raw", 7, -3, 2**61 - 2, True, None, 1.5, ("model.x", 0, 128), (4,)]
    data = pickle.dumps({key: None for key in keys}, protocol=4)
    assert list(restricted_loads(data, allowed, record_types(allowed))) == keys


def test_a_real_dcp_metadata_past_the_old_opcode_limit_is_read():
    """180,000 chunks (a 70B model with Adam saved on ~64 ranks), written with DCP's own
    classes: ~12.2M opcodes, past the 12,000,000 a .metadata was once limited to. It is
    read, charged ~39 of the 64 bytes per byte of file its budget allows."""
    from bench.dcp_metadata_read import build_metadata

    data = build_metadata(1800, 100, shared_paths=True)
    allowed = allowed_classes("plain")
    reader = RestrictedUnpickler(data, allowed, record_types(allowed))
    metadata = reader.load()
    check_schema(metadata, allowed, len(data))
    assert reader.charged < 0.7 * reader.budget
    assert sum(len(item.chunks) for item in metadata.state_dict_metadata.values()) == 180_000
    assert len(metadata.storage_data) == 180_000


# Every CLI case below is planted into its own copy of the pristine run, then all of them
# run in ONE limited process (`outcomes`): a process start costs seconds, a case far less.
PLANTS: dict[
    str, tuple[str, object]
] = {}  # case name -> (class, plant(run) -> commands, expectations)


def plant(name: str, kind: str):
    def register(function):
        PLANTS[name] = (kind, function)
        return function

    return register


def validate_only(run: Path) -> list[list]:
    return [["ckpt", "validate", run]]


def deep_and_export(run: Path) -> list[list]:
    return [
        ["ckpt", "validate", run, "--deep"],
        ["ckpt", "export-hf", run, "--out", run.parent / "hf"],
    ]


# -- 2. bounds: .metadata
def _metadata_plant(name: str, data_or_edit, fragment: str, commands=None) -> None:
    def planted(run: Path):
        if callable(data_or_edit):
            data_or_edit(run)
        else:
            write_metadata(step_of(run), data_or_edit)
        return (commands or (lambda r: [["ckpt", "validate", r], ["ckpt", "inspect", r]]))(
            run
        ), fragment

    plant(name, "bounds")(planted)


_metadata_plant(  # past the 1 GiB floor; its size times BUDGET_PER_BYTE is below it
    "empty_dict_flood",
    _flood(b"}", MIN_BUDGET // (CONTAINER + TEXT_PER_BYTE) + 1000),
    "would retain more than 1,024 MiB",
    validate_only,
)
_metadata_plant(
    "memo_index_2g",
    b"\x80\x02Nr" + struct.pack("<I", 0x7FFFFFF0) + b".",
    "skips past the 0 entries",
)
_metadata_plant(
    "memo_index_256m",
    b"\x80\x02Nr" + struct.pack("<I", 0x10000000) + b"N.",
    "skips past the 0 entries",
)
_metadata_plant("deep_tuple_key", b"\x80\x02})" + b"\x85" * 100_000 + b"Ns.", "dict key")
_metadata_plant(
    "long4_integer", b"\x80\x02\x8b" + struct.pack("<i", 1 << 20) + bytes(1 << 20) + b".", "LONG4"
)
for _size in (MAX_METADATA_BYTES + 1, 3 << 30):
    _metadata_plant(
        f"sparse_metadata_{_size >> 20}m",
        lambda run, size=_size: os.truncate(dist_of(run) / layout.DCP_METADATA_FILE, size),
        "bytes",
    )


# -- 2. bounds: blob pickles and archives
def _target(run: Path):
    from mfsdp_ckpt.storage.reader import CheckpointReader

    return max(
        (
            e
            for e in CheckpointReader(dist_of(run)).tensors.values()
            if e.name.startswith("model.") and e.dtype.name == "float32"
        ),
        key=lambda e: e.numel,
    )


@functools.cache
def _blob_bombs(shape: tuple[int, ...]) -> dict[str, tuple[bytes, str]]:
    """Variants of a real blob of a float32 tensor of `shape`, each what torch.save never writes."""
    real = saved_tensor_blob(torch.zeros(shape))
    pkl = "data.pkl"
    numel = torch.Size(shape).numel()
    bigger = zipfile.ZipFile(
        io.BytesIO(saved_tensor_blob(torch.zeros(numel + (1 << 20))[:numel].view(shape)))
    )
    bigger_pkl = bigger.read(next(n for n in bigger.namelist() if n.endswith("data.pkl")))
    return {
        "deflate_bomb": (
            rezip(real, compress={pkl}, inflated=256 << 20, pad=numel * 4),
            "compressed",
        ),
        "pickle_flood": (
            rezip(real, replace={pkl: _flood(b"}", 40 << 20)}),
            "would retain more than 64 MiB",
        ),  # the 40 MB one
        "pickle_memo": (
            rezip(real, replace={pkl: b"\x80\x02Nr" + struct.pack("<I", 0x10000000) + b"."}),
            "memo index",
        ),
        "many_members": (rezip(real, extra_members=5000), "members"),
        "storage_claims_more": (rezip(real, replace={pkl: bigger_pkl}), "storage claims"),
    }


for _bomb in ("deflate_bomb", "pickle_flood", "pickle_memo", "many_members", "storage_claims_more"):

    @plant(f"blob_{_bomb}", "bounds")
    def _planted(run: Path, bomb=_bomb):
        target = _target(run)
        blob, fragment = _blob_bombs(target.shape)[bomb]
        replace_blob(run, blob, target.name)
        return deep_and_export(run), fragment


# -- 2. bounds: many chunks, many files, long names
def _many_chunks(kind: str, count: int):
    """A tensor split into `count` one-element chunks: slabs, a grid, or a staircase of
    2x2 chunks whose spans overlap partly on both dims (no split possible: the irregular case)."""
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

    if kind == "slabs":
        return (count,), [
            ChunkStorageMetadata(torch.Size([i]), torch.Size([1])) for i in range(count)
        ]
    side = int(count**0.5)
    if kind == "grid":
        return (side, side), [
            ChunkStorageMetadata(torch.Size([i, j]), torch.Size([1, 1]))
            for i in range(side)
            for j in range(side)
        ]
    return (count + 1, count + 1), [
        ChunkStorageMetadata(torch.Size([i, i]), torch.Size([2, 2])) for i in range(count)
    ]


# slabs at 40,000 chunks (800M pairs, far past the time limit pairwise); grid and staircase at
# 10,000: 50M pairs, still past it
for _kind, _count, _expected in (
    ("slabs", 40_000, ""),
    ("grid", 10_000, ""),
    ("staircase", 10_000, "irregular tiling too large to check"),
):

    @plant(f"chunks_{_count}_{_kind}", "bounds")
    def _planted(run: Path, kind=_kind, count=_count, expected=_expected):
        def edit(metadata) -> None:
            from torch.distributed.checkpoint.metadata import MetadataIndex

            key = model_weight(metadata)
            item = metadata.state_dict_metadata[key]
            info = next(v for k, v in metadata.storage_data.items() if k.fqn == key)
            shape, chunks = _many_chunks(kind, count)
            item.size, item.chunks = torch.Size(shape), chunks
            for index in [i for i in metadata.storage_data if i.fqn == key]:
                del metadata.storage_data[index]
            for chunk in chunks:  # no bytes (two chunks naming one blob are refused first)
                metadata.storage_data[MetadataIndex(key, chunk.offsets)] = dataclasses.replace(
                    info, length=0
                )

        edit_metadata(step_of(run), edit)
        # valid tilings: no overlap or gap found (the shape vs config.json and the chunks'
        # empty blobs are the findings)
        return validate_only(run), expected


MISSING_FILES = (1_000, 100_000)  # the first calibrates the cost of the second
LINEAR_SLACK = 4  # measured: the large case takes 0.9x its linear share (8.0 s vs 100 x 0.09 s)


def _linear_cpu_bound(outcomes: dict, count: int) -> float:
    """The most CPU time validating a manifest of `count` missing files may take: the
    calibrating case's (MISSING_FILES[0] files, every fixed cost of validate included) times
    the ratio of the counts, times LINEAR_SLACK (a sort's log factor, a collection's
    noise). Linear work stays under it; work growing with the square of the count (a
    lookup per file through every other one: a hundred times its linear share) exceeds it."""
    (calibrating,), _ = outcomes[f"manifest_{MISSING_FILES[0]}_missing"]
    return calibrating["cpu_seconds"] * count / MISSING_FILES[0] * LINEAR_SLACK


for _count in MISSING_FILES:

    @plant(f"manifest_{_count}_missing", "bounds")
    def _planted(run: Path, count=_count):
        path = step_of(run) / layout.MANIFEST_FILE
        data = json.loads(path.read_text())
        data["files"].update(
            {f"dist_ckpt/gone_{i}.distcp": {"size": 1, "sha256": "0" * 64} for i in range(count)}
        )
        path.write_text(json.dumps(resealed(data)))
        return validate_only(run), "listed in the manifest but missing"


for _length in (5_000, 200_000):

    @plant(f"name_{_length}_chars", "bounds")
    def _planted(run: Path, length=_length):
        def edit(metadata) -> None:
            key = model_weight(metadata)
            long = "model." + "x" * length
            metadata.state_dict_metadata[long] = metadata.state_dict_metadata.pop(key)
            for index in [i for i in metadata.storage_data if i.fqn == key]:
                metadata.storage_data[dataclasses.replace(index, fqn=long)] = (
                    metadata.storage_data.pop(index)
                )

        edit_metadata(step_of(run), edit)
        return [["ckpt", "inspect", run], ["ckpt", "validate", run]], "chars)"


# -- 3. special files
def _plant_special(run: Path, target: str, kind: str) -> None:
    path = {
        "metadata": dist_of(run) / layout.DCP_METADATA_FILE,
        "manifest": step_of(run) / layout.MANIFEST_FILE,
        "shard": max(dist_of(run).glob("*.distcp"), key=lambda p: p.stat().st_size),
    }[target]
    outside = run.parent / "outside"
    if kind == "link_out":
        shutil.copy(path, outside)
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(outside)


for _where in ("metadata", "manifest", "shard"):
    for _what in ("fifo", "dev_zero", "directory", "link_out"):

        @plant(f"{_where}_{_what}", "special")
        def _planted(run: Path, where=_where, what=_what):
            _plant_special(run, where, what)
            inspect = (
                [] if where == "shard" else [["ckpt", "inspect", run]]
            )  # inspect reads no shard
            return deep_and_export(run) + inspect, ""


# -- 4. declared bytes
for _shape in ((2**38,), (2**20, 2**18), (3, 2**36)):

    @plant("claims_" + "x".join(map(str, _shape)), "declared")
    def _planted(run: Path, shape=_shape):
        def edit(metadata) -> None:
            from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex

            key = model_weight(metadata)
            item = metadata.state_dict_metadata[key]
            info = next(v for k, v in metadata.storage_data.items() if k.fqn == key)
            for index in [i for i in metadata.storage_data if i.fqn == key]:
                del metadata.storage_data[index]
            item.size = torch.Size(shape)
            item.chunks = [ChunkStorageMetadata(torch.Size([0] * len(shape)), torch.Size(shape))]
            metadata.storage_data[MetadataIndex(key, item.chunks[0].offsets)] = info

        edit_metadata(step_of(run), edit)
        return [
            ["ckpt", "validate", run],
            ["ckpt", "export-hf", run, "--out", run.parent / "hf"],
        ], "cannot hold"


for _stored in (torch.int32, torch.int64, torch.float64, torch.complex64):

    @plant(f"blob_holds_{str(_stored).split('.')[1]}", "declared")
    def _planted(run: Path, stored=_stored):
        target = _target(run)
        replace_blob(run, saved_tensor_blob(torch.ones(target.shape, dtype=stored)), target.name)
        return deep_and_export(run), f"blob holds {stored}"


# -- 5. terminal injection
HOSTILE_NAMES = [
    "\x1b[2J\x1b[31mred",
    "a\nvalid: forged line",
    "\r\x08\x07",
    "\u202etxt.exe",
    "\x00nul",
    "\u2028sep",
    "missing.\x1b]0;title\x07",
]


@plant("hostile_names", "terminal")
def _planted(run: Path):
    from mfsdp_ckpt.checkpointer import Checkpointer

    named = run.parent / "named"
    Checkpointer(named, strategy="none").save(
        1,
        {"model": {f"layer.{i}.{n}": torch.zeros(2) for i, n in enumerate(HOSTILE_NAMES)}},
        contents=("model",),
    )
    for shard in dist_of(named).glob("*.distcp"):
        shard.unlink()  # so that validate's findings quote every name
    return [
        ["ckpt", "inspect", named],
        ["ckpt", "validate", named, "--deep"],
        ["ckpt", "inspect", named, "--json"],
    ], ""


@pytest.fixture(scope="module")
def outcomes(pristine, tmp_path_factory) -> dict[str, tuple[list[dict], str]]:
    """case name -> (the records of its commands, the fragment its refusals must show)."""
    scratch = tmp_path_factory.mktemp("hostile")
    cases, owners, fragments = [], [], {}
    for name, (_kind, planted) in PLANTS.items():
        commands, fragments[name] = planted(copy_of(pristine, scratch, name))
        cases += commands
        owners += [name] * len(commands)
    grouped: dict[str, list[dict]] = {name: [] for name in PLANTS}
    for owner, record in zip(owners, run_limited(cases, scratch)):
        grouped[owner].append(record)
    return {name: (grouped[name], fragments[name]) for name in PLANTS}


def _names(kind: str) -> list[str]:
    return [name for name, (k, _) in PLANTS.items() if k == kind]


@pytest.mark.parametrize("case", _names("bounds") + _names("declared"))
def test_hostile_sizes_are_refused_within_limits(outcomes, case):
    records, fragment = outcomes[case]
    for record in records:
        if case.startswith("chunks_") and not fragment:  # a valid tiling of a wrong shape
            assert record["escaped"] is None and record["seconds"] < MAX_SECONDS, record["first"]
            assert "overlap" not in record["output"] and "gap" not in record["output"], record[
                "first"
            ]
        elif case.startswith("name_"):  # accepted or not, printed bounded
            assert record["escaped"] is None and record["output_bytes"] < 64 << 10, record["first"]
            assert fragment in record["output"], record["first"]
        elif case == f"manifest_{MISSING_FILES[-1]}_missing":  # one finding per listed file:
            bound = _linear_cpu_bound(outcomes, MISSING_FILES[-1])  # linear in its 12 MB
            assert_refused(record, fragment=fragment, max_output=32 << 20, max_cpu_seconds=bound)
        else:
            assert_refused(record, fragment=fragment)
        assert not (Path(record["args"][2]).parent / "hf").exists(), record["args"]


@pytest.mark.parametrize("case", _names("special"))
def test_special_files_are_refused_before_opening(outcomes, case):
    records, _ = outcomes[case]
    for record in records:
        assert_refused(record)
        assert not (Path(record["args"][2]).parent / "hf").exists(), record["args"]


def test_names_cannot_drive_the_terminal_or_forge_lines(outcomes):
    (inspected, validated, as_json), _ = outcomes["hostile_names"]
    for record in (inspected, validated):
        assert record["escaped"] is None, record
        text = record["output"]
        assert not any(c in text for c in "\x1b\r\x08\x07\x00\u202e\u2028"), repr(text[:500])
        assert [line for line in text.splitlines() if line.startswith("valid:")] == [], text
    assert "INVALID" in validated["output"]
    names = {t["name"] for t in json.loads(as_json["output"])["tensors"]}
    assert names == {f"model.layer.{i}.{n}" for i, n in enumerate(HOSTILE_NAMES)}
