"""validate's check for pickles torch would run (`object_pickles`) called plain Python values
code: a set, bytearray or complex (torch.save writes them as Python 2's `__builtin__.set`,
which every unpickler reads as builtins'), an empty bytes or BytesIO, a datetime, deque,
path, frozenset, slice or range: valid checkpoints of 5a5357a became INVALID (exit 1). A
user's dataclass (rebuilt without its __init__, its module imported) is a warning, not
an error worded like os.system."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import io
import pathlib

import torch
import torch.distributed.checkpoint as dcp

from tests.support.interop_layouts import run_cli

PLAIN_VALUES = {
    "set": {1, 2},
    "bytearray": bytearray(b"ab"),
    "complex": complex(1, 2),
    "empty_bytes": b"",
    "empty_bytes_io": io.BytesIO(),
    "datetime": datetime.datetime(2026, 12, 5, 19, 0),
    "timedelta": datetime.timedelta(seconds=3),
    "deque": collections.deque([1, 2]),
    "defaultdict": collections.defaultdict(list, {"a": [1]}),
    "path": pathlib.PurePosixPath("/data/train.parquet"),
    "frozenset": frozenset({"a"}),
    "slice": slice(1, 5),
    "range": range(3),
}


@dataclasses.dataclass
class TrainCfg:
    lr: float = 1e-5


def _save(tmp_path, extra: dict):
    out = tmp_path / "ckpt"
    state = {"model.embed_tokens.weight": torch.randn(8, 4), **extra}
    dcp.save(state, checkpoint_id=str(out), no_dist=True)
    return out


def test_plain_python_values_are_valid(tmp_path):
    ckpt = _save(tmp_path, {f"extra.{name}": value for name, value in PLAIN_VALUES.items()})
    for deep in ([], ["--deep"]):
        code, stdout, err = run_cli("ckpt", "validate", ckpt, *deep)
        assert code == 0, stdout + err
        assert "pickle" not in stdout + err, stdout + err


def test_a_dataclass_of_the_users_is_a_warning_naming_its_class(tmp_path):
    ckpt = _save(tmp_path, {"extra.cfg": TrainCfg()})
    code, stdout, err = run_cli("ckpt", "validate", ckpt)
    assert code == 0, stdout + err
    warnings = [line for line in (stdout + err).splitlines() if "[extra.cfg]" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning:"), stdout + err
    assert f"rebuilds objects of {__name__}.TrainCfg" in warnings[0], warnings[0]
