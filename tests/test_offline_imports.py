"""The offline commands (export-hf, validate, inspect) do not import what they do not use.

`torch.distributed.checkpoint` drags in DTensor, torch.fx and sympy (0.65 s quiet, seconds
under load), and transformers more: start-up is the largest cost of exporting a small model
(docs/benchmarks.md). The reader unpickles `.metadata` into `mfsdp_ckpt.plain_metadata`
instead of DCP's classes; this holds the stand-ins equal to what DCP itself reads, and
the plain dtype records (`mfsdp_ckpt.dtypes`) equal to torch's own.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt import dtypes, layout
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.reader import _tensor_layout
from mfsdp_ckpt.safe_metadata import load_metadata_bytes, load_plain_metadata_bytes

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch.distributed.checkpoint", "torch.distributed.tensor", "transformers")

LOADED_AFTER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
{body}
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "transformers"
                        or m.startswith(("torch.distributed.checkpoint", "torch.distributed.tensor")))))
"""


def heavy_modules_after(body: str, *args: str) -> list[str]:
    """Run `body` in a fresh interpreter; the heavy modules it left in sys.modules."""
    done = subprocess.run([sys.executable, "-c", LOADED_AFTER.format(body=body), str(REPO), *args],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def dist_ckpt(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("imports") / "run"
    Checkpointer(run, strategy="none").save(
        1, {"model": {"w": torch.randn(6, 4), "b": torch.randn(4)}, "extra": {"step": 1}},
        contents=("model", "extra"),
    )
    return layout.step_dir(run, 1) / layout.DIST_CKPT_DIR


def test_importing_the_export_command_loads_no_dcp_nor_transformers():
    loaded = heavy_modules_after("import cli.main, cli.export_hf, mfsdp_ckpt.export_hf")
    assert loaded == [], f"importing export-hf loaded {loaded[:5]}"


def test_dtype_records_match_torch():
    """Every torch dtype has a record with its size and kind; the safetensors codes are the
    ones safetensors writes, and torch.save's storage classes map back to their dtype."""
    from safetensors.torch import save

    for attr in dir(torch):
        value = getattr(torch, attr)
        if isinstance(value, torch.dtype):
            record = dtypes.BY_NAME[attr]
            assert record.torch == value and str(record) == str(value), attr
            assert (record.itemsize, record.is_floating_point) == (value.itemsize, value.is_floating_point), attr
    for record in set(dtypes.BY_NAME.values()):
        if record.safetensors:
            blob = save({"x": torch.zeros(1, dtype=record.torch)})
            header = json.loads(blob[8 : 8 + int.from_bytes(blob[:8], "little")])
            assert header["x"]["dtype"] == record.safetensors, record
        if record.storage:
            buffer = io.BytesIO()
            torch.save(torch.zeros(3, dtype=record.torch), buffer)
            archive = zipfile.ZipFile(buffer)
            pickled = next(name for name in archive.namelist() if name.endswith("/data.pkl"))
            assert _tensor_layout(archive.read(pickled))[0] is record


def test_reading_validating_and_inspecting_load_no_dcp(dist_ckpt):
    body = (
        "from mfsdp_ckpt.reader import CheckpointReader\n"
        "from mfsdp_ckpt.validate import validate_checkpoint\n"
        "from mfsdp_ckpt.inspect import describe_checkpoint\n"
        "reader = CheckpointReader(sys.argv[2])\n"
        "assert reader.read_tensor('model.w').shape == (6, 4), reader.tensors\n"
        "assert reader.read_object('extra.step') == 1\n"
        "assert validate_checkpoint(sys.argv[2], deep=True).ok()\n"
        "describe_checkpoint(sys.argv[2])\n"
    )
    loaded = heavy_modules_after(body, str(dist_ckpt))
    assert loaded == [], f"reading a checkpoint loaded {loaded[:5]}"


def _summary(metadata) -> tuple:
    """What the reader takes from metadata, in plain values, for either class table (dtypes
    and layouts by name: torch's own objects or the plain stand-ins)."""
    items = {
        key: (type(item).__name__, tuple(getattr(item, "size", ())),
              str(getattr(getattr(item, "properties", None), "dtype", None)),
              str(getattr(getattr(item, "properties", None), "layout", None)),
              [(tuple(c.offsets), tuple(c.sizes)) for c in getattr(item, "chunks", [])])
        for key, item in metadata.state_dict_metadata.items()
    }
    storage = {
        (index.fqn, tuple(index.offset) if index.offset is not None else None):
            (info.relative_path, info.offset, info.length, getattr(info, "transform_descriptors", None))
        for index, info in metadata.storage_data.items()
    }
    return items, storage


def test_plain_metadata_reads_the_same_values_as_dcp(dist_ckpt):
    from torch.distributed.checkpoint.metadata import Metadata

    raw = (dist_ckpt / layout.DCP_METADATA_FILE).read_bytes()
    real, plain = load_metadata_bytes(raw), load_plain_metadata_bytes(raw)
    assert isinstance(real, Metadata) and not isinstance(plain, Metadata)
    assert type(plain).__module__ == "mfsdp_ckpt.plain_metadata"
    assert _summary(plain) == _summary(real)
    assert len(_summary(plain)[1]) == 3  # two tensors and one object, each with its storage entry


def test_cli_root_and_help_import_no_torch():
    """`mfsdp --help`, and every command's early errors, answer in a fraction of a second."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from cli.main import app; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))", str(REPO)],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
