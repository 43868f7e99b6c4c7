"""A Megatron-LM checkpoint's `args` and `iteration` are read and unpickled once per command:
export-hf read `args` three times (whether a config is recorded, the config derived, the
recorded layout), validate five times and `iteration` twice, inspect `args` three times and
`iteration` twice. Counted here as reads of the
blob's exact byte range from its data file (validate's pickle scan reads a run of
neighbouring blobs at once, a wider range), through the store's real file reads."""

from __future__ import annotations

import collections

import pytest

from mfsdp_ckpt.storage.byte_store import LocalByteStore
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import STEP, megatron_args, megatron_run

RECORDS = ("args", "iteration")


@pytest.fixture
def run(tmp_path):
    model = tiny_causal_lm("qwen3")
    return megatron_run(tmp_path, model, megatron_args(model), optimizer=True)


def _blob_reads(monkeypatch, run, *command) -> collections.Counter:
    """How many times `command` (which must succeed) read each record's blob."""
    objects = CheckpointReader(run / f"iter_{STEP:07d}").objects
    spans = {(objects[n].file, objects[n].file_offset, objects[n].length): n for n in RECORDS}
    reads: collections.Counter = collections.Counter()
    read_range = LocalByteStore.read_range

    def counted(self, name, offset, length):
        if (name, offset, length) in spans:
            reads[spans[name, offset, length]] += 1
        return read_range(self, name, offset, length)

    monkeypatch.setattr(LocalByteStore, "read_range", counted)
    code, stdout, err = run_cli(*command)
    monkeypatch.undo()
    assert code == 0, stdout + err
    return reads


def test_export_reads_args_once(monkeypatch, run, tmp_path):
    reads = _blob_reads(monkeypatch, run, "ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert reads["args"] == 1


def test_validate_reads_args_and_iteration_once(monkeypatch, run):
    reads = _blob_reads(monkeypatch, run, "ckpt", "validate", run)
    assert reads == {"args": 1, "iteration": 1}


def test_inspect_reads_args_and_iteration_once(monkeypatch, run):
    """inspect's rows of the two show what the model line and the step check read."""
    reads = _blob_reads(monkeypatch, run, "ckpt", "inspect", run)
    assert reads == {"args": 1, "iteration": 1}


def test_a_damaged_args_fails_each_asker_alike(tmp_path):
    """The error reading `args` is kept: a later ask gets the same one line, naming the
    record, as the first."""
    from mfsdp_ckpt.convert.megatron_record import read_args
    from mfsdp_ckpt.errors import CheckpointFormatError

    model = tiny_causal_lm("qwen3")
    dist = megatron_run(tmp_path, model, megatron_args(model)) / f"iter_{STEP:07d}"
    entry = CheckpointReader(dist).objects["args"]
    with open(dist / entry.file, "r+b") as handle:  # its pickle cut: no STOP
        handle.seek(entry.file_offset + entry.length // 2)
        handle.write(b"\x00" * (entry.length // 4))
    reader = CheckpointReader(dist)
    errors = []
    for _ in range(2):
        with pytest.raises(CheckpointFormatError) as raised:
            read_args(reader)
        errors.append(str(raised.value))
    assert errors[0] == errors[1] and "[args]" in errors[0]
