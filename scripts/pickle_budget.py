#!/usr/bin/env python
"""Reproduce the numbers behind the restricted unpickler's memory budget.

    python scripts/pickle_budget.py                  # every flood, then the .metadata shapes
    python scripts/pickle_budget.py --only MEMOIZE,SETITEMS --no-shapes

1. What each opcode retains: a flood of it (a unit of a few opcodes, repeated) read by
   `RestrictedUnpickler` with an unlimited budget, each flood in a fresh process. Per unit:
   RSS growth, peak bytes allocated (tracemalloc: also what a large table allocates but
   has not touched yet) and what the unpickler charged (with the TEXT_PER_BYTE set aside
   per input byte). The costs in mfsdp_ckpt/format/restricted_pickle.py are set so that
   charged >= both for every flood; dict-like floods stop just past a resize (the table's
   worst fill). The `torch:` floods are read by torch's weights-only unpickler, against
   what `check_pickle_budget` charges (blob pickles).
2. What a real DCP `.metadata` is charged per byte of the file, for several shapes written
   with DCP's own classes (bench/dcp_metadata_read.py): BUDGET_PER_BYTE must exceed the
   largest, with room.
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DCP = "torch.distributed.checkpoint.metadata"
PAST_RESIZE = 174_763  # 2/3 of 2**18, plus one: a dict of this many entries has just doubled
SET_PAST_RESIZE = 19_661  # 3/5 of 2**15, plus one: a set of this many items has just grown 4x

PROBE = r"""
import io, sys, tracemalloc
sys.path.insert(0, sys.argv[1])
table, path, units = sys.argv[2], sys.argv[3], int(sys.argv[4])
from mfsdp_ckpt.format.restricted_pickle import RestrictedUnpickler, check_pickle_budget
data = open(path, "rb").read()
if table == "torch":  # blob pickles: check_pickle_budget's charge, torch's unpickler's memory
    import torch
    from torch._weights_only_unpickler import Unpickler
    reader = Unpickler(io.BytesIO(data))
    reader.persistent_load = lambda pid: torch.storage.TypedStorage(
        wrap_storage=torch.UntypedStorage(16), dtype=torch.float32, _internal=True
    )
    charged = check_pickle_budget(data, 1 << 50, "flood")
else:
    if table == "namespace":
        from mfsdp_ckpt.format.saved_objects import (
            NAMESPACE_TABLE, NamespaceRecord, args_placeholder
        )
        allowed, records, policy = NAMESPACE_TABLE, (NamespaceRecord,), args_placeholder
    else:
        from mfsdp_ckpt.format.dcp_metadata import allowed_classes, record_types
        allowed = allowed_classes(table)
        records, policy = record_types(allowed), None
    reader = RestrictedUnpickler(data, allowed, records, budget=1 << 50, placeholders=policy)

def rss():
    with open("/proc/self/status") as status:
        return int(next(l for l in status if l.startswith("VmRSS:")).split()[1]) * 1024

if sys.argv[5] == "allocated":
    tracemalloc.start()
before = rss()
reader.load()  # what it built stays alive in its stack and memo
grew = tracemalloc.get_traced_memory()[1] if sys.argv[5] == "allocated" else rss() - before
print(grew / units, (charged if table == "torch" else reader.charged) / units)
"""


def _global(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def _text(value: str) -> bytes:
    raw = value.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _int(i: int) -> bytes:
    return b"J" + struct.pack("<i", i)


def _big(i: int) -> bytes:
    return b"\x8a\x08" + struct.pack("<q", (1 << 62) + i)


def _tuple(items: list[bytes]) -> bytes:
    return b"(" + b"".join(items) + b"t"


def _memo(value: bytes, slot: int) -> bytes:
    """`value` pushed, stored in memo `slot` and popped again."""
    return value + b"r" + struct.pack("<I", slot) + b"0"


GET0, GET1, GET2 = b"h\x00", b"h\x01", b"h\x02"
Unit = bytes | Callable[[int], bytes]
Flood = tuple[str, bytes, Unit, int, bytes]  # table, prefix, unit, units, suffix


def _record_fields(table: str, name: str) -> tuple[str, ...]:
    from mfsdp_ckpt.format.dcp_metadata import allowed_classes

    cls: type = allowed_classes(table)[(DCP, name)]  # type: ignore[assignment]
    return tuple(cls.__dataclass_fields__)  # type: ignore[attr-defined]


def _build_state(table: str, name: str) -> bytes:
    """The state a BUILD of record `name` gets: every field, as DCP pickles it."""
    if name == "TensorProperties":
        encoding = _global(DCP, "_MEM_FORMAT_ENCODING") + b"K\x00\x85R"
        return _tuple([_global("torch", "float32"), b"N\x89", encoding, b"\x89"])
    fields = _record_fields(table, name)
    return b"}(" + b"".join(_text(f) + b"N" for f in fields) + b"u"


def floods() -> dict[str, Flood]:
    """name -> (class table, prefix, unit (bytes, or bytes for unit i), units, suffix)."""
    many, past = 500_000, PAST_RESIZE
    out: dict[str, Flood] = {
        "EMPTY_DICT": ("plain", b"", b"}", many, b""),
        "EMPTY_LIST": ("plain", b"", b"]", many, b""),
        "MARK": ("plain", b"", b"(", many, b""),
        "EMPTY_TUPLE": ("plain", b"", b")", many, b""),
        "NONE": ("plain", b"", b"N", many, b""),
        "DUP": ("plain", b"N", b"2", many, b""),
        "BINGET": ("plain", _memo(b"N", 0), GET0, many, b""),
        "TUPLE1": ("plain", b"", b")\x85", many, b""),
        "TUPLE2": ("plain", b"", b"NN\x86", many, b""),
        "TUPLE3": ("plain", b"", b"NNN\x87", many, b""),
        "TUPLE": ("plain", b"", b"(t", many, b""),
        "LIST": ("plain", b"", b"(l", many, b""),
        "BININT2": ("plain", b"", b"M\x01\x01", many, b""),
        "BININT": ("plain", b"", _int(1 << 30), many, b""),
        "LONG1": ("plain", b"", _big(0), many, b""),
        "BINFLOAT": ("plain", b"", b"G" + struct.pack(">d", 0.5), many, b""),
        "SHORT_BINUNICODE": ("plain", b"", b"\x8c\x02ab", many, b""),
        "SHORT_BINBYTES": ("plain", b"", b"C\x02ab", many, b""),
        "MEMOIZE": ("plain", b"", b"N\x94", past, b""),
        "MEMOIZE (one object)": ("plain", b"N", b"\x94", past, b""),
        "LONG_BINPUT": ("plain", b"N", lambda i: b"r" + struct.pack("<I", i), past, b""),
        "APPEND": ("plain", b"]", b"Na", many, b""),
        "APPENDS": ("plain", b"](", b"N", many, b"e"),
        "SETITEM": ("plain", b"}", lambda i: _int(i) + b"Ns", past, b""),
        "SETITEMS": ("plain", b"}(", lambda i: _int(i) + b"N", past, b"u"),
        "DICT": ("plain", b"(", lambda i: _int(i) + b"N", past, b"d"),
        "EMPTY_SET": ("plain", b"", b"\x8f", many, b""),
        "ADDITEMS": ("plain", b"\x8f(", _int, SET_PAST_RESIZE, b"\x90"),
        "FROZENSET": ("plain", b"(", _int, SET_PAST_RESIZE, b"\x91"),
        "FROZENSET (one item)": ("plain", b"", b"(N\x91", many, b""),
        "SETITEMS OrderedDict": (
            "dcp",
            _global("collections", "OrderedDict") + b")R(",
            lambda i: _int(i) + b"N",
            past,
            b"u",
        ),
        "GLOBAL placeholder": ("namespace", b"", _global("some.module", "Name"), many // 2, b""),
        "REDUCE placeholder": (
            "namespace",
            _memo(_global("some.module", "Name"), 0),
            GET0 + b")R",
            past,
            b"",
        ),
        "NEWOBJ placeholder": (
            "namespace",
            _memo(_global("some.module", "Name"), 0),
            GET0 + b")\x81",
            past,
            b"",
        ),
        "REDUCE enum": (
            "plain",
            _memo(_global(DCP, "_MEM_FORMAT_ENCODING"), 0),
            GET0 + b"K\x00\x85R",
            many // 2,
            b"",
        ),
        "REDUCE OrderedDict": (
            "dcp",
            _memo(_global("collections", "OrderedDict"), 0),
            GET0 + b")R",
            many // 2,
            b"",
        ),
    }
    dims = _memo(_tuple([_big(i) for i in range(64)]), 1)
    out["REDUCE torch.Size (64 dims)"] = (
        "dcp",
        _memo(_global("torch", "Size"), 0) + dims,
        GET0 + GET1 + b"\x85R",
        200_000,
        b"",
    )
    out["REDUCE MetadataIndex (64 dims)"] = (
        "dcp",
        _memo(_global(DCP, "MetadataIndex"), 0) + dims + _memo(_text("w"), 2),
        GET0 + GET2 + GET1 + b"\x86R",
        200_000,
        b"",
    )
    for label, part in (("ab/", "ab/"), ("\u20ac/", "\u20ac/")):
        out[f"REDUCE Path ({label!a} x 300)"] = (
            "plain",
            _memo(_global("pathlib", "PosixPath"), 0) + _memo(_text(part * 300), 1),
            GET0 + GET1 + b"\x85R",
            20_000,
            b"",
        )
    out["REDUCE Path (new 1-char parts)"] = (
        "plain",
        _memo(_global("pathlib", "PosixPath"), 0),
        lambda i: GET0 + _text("/".join(chr(0x10000 + 20 * i + j) for j in range(20))) + b"\x85R",
        10_000,
        b"",
    )
    out["REDUCE Path (new parts)"] = (
        "plain",
        _memo(_global("pathlib", "PosixPath"), 0),
        lambda i: GET0 + _text("/".join(f"{i:x}.{j}" for j in range(20))) + b"\x85R",
        20_000,
        b"",
    )
    tensor = (  # a tensor pickle as torch.save writes it, its storage and sizes memoized
        _global("torch._utils", "_rebuild_tensor_v2")
        + b"q\x00("
        + _text("storage")
        + _global("torch", "FloatStorage")
        + _text("0")
        + _text("cpu")
        + b"K\x04tQq\x01K\x04\x85q\x02K\x01\x85q\x03"
        + _global("collections", "OrderedDict")
        + b")Rq\x04"
    )
    out["torch: LONG_BINPUT"] = ("torch", b"N", lambda i: b"r" + struct.pack("<I", i), past, b"")
    out["torch: EMPTY_DICT"] = ("torch", b"", b"}", many, b"")
    out["torch: MARK"] = ("torch", b"", b"(", many, b"")
    out["torch: REDUCE tensor"] = (
        "torch",
        tensor,
        GET0 + b"(" + GET1 + b"K\x00" + GET2 + b"h\x03\x89h\x04tR",
        300_000,
        b"",
    )
    for table in ("plain", "dcp"):
        for name in RECORDS:
            cls = _memo(_global(DCP, name), 0)
            out[f"NEWOBJ {name} ({table})"] = (table, cls, GET0 + b")\x81", past, b"")
            out[f"NEWOBJ+BUILD {name} ({table})"] = (
                table,
                cls + _memo(_build_state(table, name), 1),
                GET0 + b")\x81" + GET1 + b"b",
                many // 2,
                b"",
            )
            if name != "TensorProperties":  # built from its 5-tuple state only
                nones = b"N" * len(_record_fields(table, name))
                out[f"REDUCE {name} ({table})"] = (
                    table,
                    cls,
                    GET0 + b"(" + nones + b"tR",
                    past,
                    b"",
                )
    return out


RECORDS = (
    "ChunkStorageMetadata",
    "TensorProperties",
    "TensorStorageMetadata",
    "BytesStorageMetadata",
    "StorageMeta",
    "Metadata",
    "MetadataIndex",
)


def _flood_bytes(prefix: bytes, unit: Unit, units: int, suffix: bytes) -> bytes:
    body = unit * units if isinstance(unit, bytes) else b"".join(unit(i) for i in range(units))
    return b"\x80\x02" + prefix + body + suffix + b"N."  # STOP takes the None


def measure(spec: Flood, scratch: Path) -> tuple[float, float, float]:
    """(bytes retained per unit by RSS, by allocation, bytes charged per unit)."""
    table, prefix, unit, units, suffix = spec
    path = scratch / "flood.pkl"
    path.write_bytes(_flood_bytes(prefix, unit, units, suffix))
    result = []
    for mode in ("rss", "allocated"):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(REPO), table, str(path), str(units), mode],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        result.append(float(out[0]))
    return result[0], result[1], float(out[1])


SHAPES: dict[str, tuple[int, int, dict]] = {  # label -> (tensors, ranks, build_metadata options)
    "Megatron names, 2-D, 100 ranks": (2000, 100, {}),
    "the same, file names shared (DCP's writer)": (2000, 100, {"shared_paths": True}),
    "4-D, 1000 ranks, short names": (
        200,
        1000,
        {"dims": 4, "name": "w{}".format, "shared_paths": True},
    ),
    "1-D, 8 ranks, short names": (
        20000,
        8,
        {"dims": 1, "name": "m.{}.b".format, "shared_paths": True},
    ),
    "1-D, 1 rank, short names, small offsets": (
        100000,
        1,
        {"dims": 1, "name": str, "shared_paths": True, "small_offsets": True},
    ),
}


def charged_per_byte(data: bytes) -> float:
    from mfsdp_ckpt.format.dcp_metadata import allowed_classes, record_types
    from mfsdp_ckpt.format.restricted_pickle import RestrictedUnpickler

    allowed = allowed_classes("plain")
    reader = RestrictedUnpickler(data, allowed, record_types(allowed), budget=1 << 50)
    reader.load()
    return reader.charged / len(data)


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated flood names (default: all)")
    parser.add_argument("--no-floods", action="store_true")
    parser.add_argument("--no-shapes", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    if not args.no_floods:
        print("| flood | RSS B/unit | allocated B/unit | charged B/unit |")
        print("|---|---|---|---|")
        with tempfile.TemporaryDirectory() as scratch:
            for name, spec in floods().items():
                if args.only and name not in args.only.split(","):
                    continue
                rss, allocated, charged = measure(spec, Path(scratch))
                flag = "" if charged >= max(rss, allocated) else "  UNDER-CHARGED"
                print(f"| {name} | {rss:.0f} | {allocated:.0f} | {charged:.0f} |{flag}", flush=True)
    if args.no_shapes:
        return
    print("\n| .metadata shape | chunks | bytes/chunk | charged B per file byte |")
    print("|---|---|---|---|")
    from bench.dcp_metadata_read import build_metadata

    for label, (tensors, ranks, options) in SHAPES.items():
        data = build_metadata(tensors, ranks, **options)
        chunks = tensors * ranks
        print(
            f"| {label} | {chunks} | {len(data) / chunks:.0f} | {charged_per_byte(data):.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
