"""validate --deep decodes every non-tensor entry it reads, with the loader that reads it
(torch's weights-only load; the restricted unpickler for a pickle naming globals torch
refuses, Megatron-LM's `args` and numpy RNG state), and fails with one line naming the file
and key where that loader refuses it. Was: a bare DCP's `iteration` whose pickle torch
cannot load passed `validate --deep` (exit 0): only its opcodes were scanned, and only a
Megatron step's `iteration` was read by the step check."""

from __future__ import annotations

import argparse
import random
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from mfsdp_ckpt.check.describe import describe_object
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.megatron_checkpoints import save_dcp

MARK = 300  # pickled as BININT2 `M,\x01`: the value each damaged entry holds somewhere
MARK_OPS = b"M,\x01"
# EMPTY_TUPLE, EMPTY_TUPLE, APPEND in the mark's 3 bytes: opcodes the pickle scan reads as
# data, which every unpickler refuses (a tuple cannot be appended to)
DAMAGE = b"))a"

ENTRIES = {
    "iteration": MARK,
    "rng_state": (np.random.RandomState(0).get_state(), random.Random(0).getstate(), MARK),
    "args": argparse.Namespace(seq_length=MARK, lr=1e-4),
    "optimizer.param_groups": ({"lr": 1e-4, "step": MARK},),
    "lr_scheduler": ({"last_epoch": MARK},),
    "extra.dataloader": ("epoch 0", MARK),
}


def _damaged(root: Path, key: str) -> Path:
    """A DCP of a tensor and every ENTRIES kind (CRCs off, as a damaged archive whose CRCs
    still match reads), the pickle of `key` holding DAMAGE where its MARK was."""
    state = {"model": {"w": torch.ones(4)}, **{k: v for k, v in ENTRIES.items() if k != key}}
    state[key] = ENTRIES[key]
    torch.serialization.set_crc32_options(False)
    try:
        ckpt = save_dcp(state, root)
    finally:
        torch.serialization.set_crc32_options(True)
    entry = CheckpointReader(ckpt).objects[key]
    data = ckpt / str(entry.file)
    raw = bytearray(data.read_bytes())
    name_length, extra = struct.unpack_from("<2H", raw, entry.file_offset + 26)
    start = entry.file_offset + 30 + name_length + extra  # the blob's data.pkl
    at = raw.index(MARK_OPS, start, entry.file_offset + entry.length)
    raw[at : at + len(MARK_OPS)] = DAMAGE
    data.write_bytes(bytes(raw))
    return data


def _layout(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """(what validate is given, the DCP dir) of a bare DCP, a verl step, a Megatron iter_N."""
    if kind == "bare DCP":
        return tmp_path / "ck", tmp_path / "ck"
    if kind == "verl step":
        run = tmp_path / "run"
        (run).mkdir()
        (run / "latest_checkpointed_iteration.txt").write_text("3")
        dcp_dir = run / "global_step_3" / "actor" / "dist_ckpt"
        return run / "global_step_3", dcp_dir
    run = tmp_path / "megatron"
    run.mkdir()
    (run / "latest_checkpointed_iteration.txt").write_text(f"{MARK}\n")
    return run / f"iter_{MARK:07d}", run / f"iter_{MARK:07d}"


def _errors(given: Path) -> list[tuple[str, str]]:
    report = validate_checkpoint(given, deep=True)
    return [(f.where, f.message) for f in report.findings if f.severity == "error"]


@pytest.mark.parametrize("kind", ["bare DCP", "verl step", "Megatron iter_N"])
def test_an_undamaged_checkpoint_of_every_entry_kind_is_valid(tmp_path, kind):
    given, dcp_dir = _layout(tmp_path, kind)
    save_dcp({"model": {"w": torch.ones(4)}, **ENTRIES}, dcp_dir)
    assert _errors(given) == []


@pytest.mark.parametrize("kind", ["bare DCP", "verl step", "Megatron iter_N"])
@pytest.mark.parametrize("key", list(ENTRIES))
def test_an_entry_its_loader_refuses_is_one_error_naming_file_and_key(tmp_path, key, kind):
    given, dcp_dir = _layout(tmp_path, kind)
    data = _damaged(dcp_dir, key)
    lines = [f"{where}: {message}" for where, message in _errors(given)]
    # validate's lines name an entry `file [key]`; the step check's, its `iteration` entry
    # read `from file` (a Megatron step's: the step it resumes from, one line either way)
    named = [line for line in lines if f"[{key}]" in line or f"its {key} entry" in line]
    assert len(named) == 1, lines
    assert f"{data} [{key}]" in named[0] or f"from {data.name}" in named[0], lines
    assert "cannot be read" in named[0] and "\n" not in named[0], lines


def test_an_extension_code_is_a_global_the_pickle_computes(tmp_path):
    """EXT1 (a global looked up by a number in copyreg's registry, which a stock load
    resolves) is refused by the plain scan too: it was read as a name of no module,
    `.<a global the pickle computes>`, and passed as harmless."""
    data = _damaged(tmp_path / "ck", "iteration")
    raw = bytearray(data.read_bytes())
    at = raw.index(DAMAGE)
    raw[at : at + len(DAMAGE)] = b"\x82\x01N"  # EXT1 1, NONE: the extension's value kept
    data.write_bytes(bytes(raw))
    report = validate_checkpoint(tmp_path / "ck", deep=False)
    lines = [f"{f.where}: {f.message}" for f in report.findings if f.severity == "error"]
    assert len(lines) == 1 and f"{data} [iteration]: " in lines[0], lines
    assert "<a global the pickle computes>" in lines[0], lines


def _saved_with_protocol_4(monkeypatch, state: dict, root: Path, protocol: int = 4) -> Path:
    """A DCP whose non-tensor entries torch.save pickled with `protocol` (4, as Megatron-LM's
    converter writes them: torch's weights-only load stops at its FRAME opcode)."""
    stock = torch.save

    def save(value, file, **options):  # tensors' records stay protocol 2, as its are
        chosen = 2 if isinstance(value, torch.Tensor) else protocol
        stock(value, file, **{**options, "pickle_protocol": chosen})

    monkeypatch.setattr(torch, "save", save)
    try:
        return save_dcp(state, root)
    finally:
        monkeypatch.setattr(torch, "save", stock)


@pytest.mark.filterwarnings("error::UserWarning")
def test_protocol_4_entries_are_read_not_called_damaged(tmp_path, monkeypatch):
    """Was: every protocol-4 entry of a real Megatron-LM converter output (a float, a string,
    the scheduler's settings) was "its value cannot be read (damaged pickle (Unsupported
    operand 149))", exit 1, and inspect called them types the restricted reader refuses."""
    state = {
        "model": {"w": torch.ones(4)},
        **ENTRIES,
        "checkpoint_version": 3.0,
        "sharding_type": "fully_reshardable",
        "rng_tensor": {"cpu": torch.get_rng_state()},
    }
    ckpt = _saved_with_protocol_4(monkeypatch, state, tmp_path / "ck")
    assert b"\x80\x04\x95" in (ckpt / "__0_0.distcp").read_bytes()  # FRAME follows PROTO 4
    assert _errors(tmp_path / "ck") == []
    reader = CheckpointReader(ckpt)
    for key, value in (("checkpoint_version", 3.0), ("sharding_type", "fully_reshardable")):
        assert describe_object(reader, reader.objects[key], decode=True)["value"] == value


def test_a_damaged_protocol_4_entry_is_still_an_error(tmp_path, monkeypatch):
    torch.serialization.set_crc32_options(False)  # as in `_damaged`: the CRC still matches
    try:
        ckpt = _saved_with_protocol_4(
            monkeypatch, {"model": {"w": torch.ones(4)}, **ENTRIES}, tmp_path
        )
    finally:
        torch.serialization.set_crc32_options(True)
    entry = CheckpointReader(ckpt).objects["lr_scheduler"]
    data = ckpt / str(entry.file)
    raw = bytearray(data.read_bytes())
    at = raw.index(MARK_OPS, entry.file_offset, entry.file_offset + entry.length)
    raw[at : at + len(MARK_OPS)] = DAMAGE
    data.write_bytes(bytes(raw))
    lines = [f"{where}: {message}" for where, message in _errors(tmp_path)]
    named = [line for line in lines if "[lr_scheduler]" in line]
    assert len(named) == 1 and "cannot be read" in named[0], lines


@pytest.mark.parametrize(
    "value",
    [
        np.arange(1_200_000),  # a sampler's permutation: 9.6 MB of int64
        (list(range(300_000)), np.int64(1)),  # an index list beside a numpy epoch counter
    ],
    ids=["numpy array", "int list beside numpy"],
)
def test_an_intact_value_past_the_args_budget_is_valid(tmp_path, value):
    """A value the scan passes is decoded within the scan's budget, not the 16 MiB sized
    for Megatron's `args`. Was: "its value cannot be read by the restricted reader (the
    pickle would retain more than 16 MiB ...)", exit 1, for an intact entry."""
    save_dcp({"model": {"w": torch.ones(4)}, "extra.sampler": value}, tmp_path / "ck")
    assert _errors(tmp_path / "ck") == []


@pytest.mark.parametrize("beside", [1, np.int64(1)], ids=["an int", "a numpy value"])
def test_a_torch_function_is_judged_alike_whatever_lies_beside_it(tmp_path, beside):
    """A reference to a torch function torch's weights-only load refuses (nothing called;
    a stock load reads it) is read as an inert name, as beside a numpy value. Was: beside an
    int, "its value cannot be read (refusing to load global torch._C._nn.gelu)", exit 1."""
    value = (torch.nn.functional.gelu, beside)
    save_dcp({"model": {"w": torch.ones(4)}, "extra.act": value}, tmp_path / "ck")
    assert _errors(tmp_path / "ck") == []


@pytest.mark.parametrize("protocol", [4, 5])
def test_sets_bytes_and_numpy_rng_state_at_protocol_4_and_5_are_read(
    tmp_path, monkeypatch, protocol
):
    """Was: a set or frozenset at protocol 4/5 "cannot be read by the restricted reader
    (opcode EMPTY_SET is not admitted ...)", a protocol-5 numpy RNG state "its pickle calls
    numpy._core.numeric._frombuffer", each exit 1; inspect showed protocol-4 bytes and a
    3-tuple (TUPLE3) as opaque, "holds types the restricted reader refuses"."""
    values = {
        "extra.seen": {1, "two", (3, "x")},
        "extra.frozen": frozenset({"x", b"y"}),
        "extra.blob": b"\x00\x01abc",
        "extra.triple": (1, 2, 3),
    }
    state = {"model": {"w": torch.ones(4)}, **ENTRIES, **values}
    ckpt = _saved_with_protocol_4(monkeypatch, state, tmp_path / "ck", protocol)
    assert _errors(tmp_path / "ck") == []
    reader = CheckpointReader(ckpt)
    for key, value in values.items():
        described = describe_object(reader, reader.objects[key], decode=True)
        assert described["kind"] == type(value).__name__, described
    assert describe_object(reader, reader.objects["extra.blob"], decode=True)["value"] is None


def test_inspect_prints_no_torch_warning_of_a_protocol_4_entry(tmp_path, monkeypatch):
    """An entry torch's load is given at protocol 4 (a torch.Size: a global torch admits)
    is described without torch's "Detected pickle protocol 4" warning reaching the user."""
    state = {"model": {"w": torch.ones(4)}, "extra.order": torch.Size([2, 3])}
    ckpt = _saved_with_protocol_4(monkeypatch, state, tmp_path / "ck")
    reader = CheckpointReader(ckpt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        describe_object(reader, reader.objects["extra.order"], decode=True)
    assert [str(w.message) for w in caught if "pickle protocol" in str(w.message)] == []
