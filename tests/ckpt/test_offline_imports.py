"""The offline commands (export-hf, validate, inspect) do not import what they do not use.

`torch.distributed.checkpoint` drags in DTensor, torch.fx and sympy (0.65 s quiet, seconds
under load), and transformers more: start-up is the largest cost of exporting a small model
(docs/benchmarks.md). The reader unpickles `.metadata` into `mfsdp_ckpt.format.dcp_metadata`
instead of DCP's classes; this holds the stand-ins equal to what DCP itself reads.

An export that changes no tensor's values (fp32 from fp32) imports no torch at all: its
bytes go file to file in the kernel, and torch's import alone (~1.5 s) kept it above 1.2x
`cp`. Dtypes on that path are `mfsdp_ckpt.format.dtypes` records, held here to torch's own.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import dtypes, layout
from mfsdp_ckpt.format.dcp_metadata import load_plain_metadata_bytes
from mfsdp_ckpt.storage.reader import _tensor_layout
from tests.support.fresh_python import modules_after
from tests.support.metadata_reads import load_metadata_bytes

RUN_CLI = "sys.argv = ['mfsdp', *sys.argv[2:]]\nfrom cli.main import main\nmain()"


@pytest.fixture(scope="module")
def dist_ckpt(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("imports") / "run"
    Checkpointer(run, strategy="none").save(
        1,
        {"model": {"w": torch.randn(6, 4), "b": torch.randn(4)}, "extra": {"step": 1}},
        contents=("model", "extra"),
    )
    return layout.step_dir(run, 1) / layout.DIST_CKPT_DIR


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory) -> Path:
    """A tiny Qwen2 checkpoint with HF names and config (what `mfsdp train` saves)."""
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("export_imports")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"))
    return root / "run"


def test_importing_the_export_command_loads_no_torch():
    loaded = modules_after(
        "import cli.main, cli.export_hf, mfsdp_ckpt.convert.export_hf",
        roots=("torch", "transformers"),
    )
    assert loaded == [], f"importing export-hf loaded {loaded[:5]}"


@pytest.mark.parametrize("dtype, casts", [("fp32", False), ("bf16", True)])
def test_export_imports_torch_only_to_cast(hf_run, tmp_path, dtype, casts):
    """fp32 from fp32 checkpoints (validation, planning, kernel copy, config) runs without
    torch; bf16 imports it for the cast, which also shows this check sees an import."""
    from tests.support.export import verify_export_dir

    out = tmp_path / "hf"
    loaded = modules_after(
        RUN_CLI,
        "ckpt",
        "export-hf",
        str(hf_run),
        "--out",
        str(out),
        "--dtype",
        dtype,
        roots=("torch", "transformers"),
    )
    assert ("torch" in loaded) == casts, f"export-hf --dtype {dtype} loaded {loaded[:5]}"
    assert "transformers" not in loaded
    assert verify_export_dir(hf_run, out) == []  # and what it wrote is right, tensor for tensor


def test_dtype_records_match_torch():
    """Every torch dtype has a record with its size and kind; the safetensors codes are the
    ones safetensors writes, and torch.save's storage classes map back to their dtype."""
    from safetensors.torch import save

    for attr in dir(torch):
        value = getattr(torch, attr)
        if isinstance(value, torch.dtype):
            record = dtypes.BY_NAME[attr]
            assert record.torch == value and str(record) == str(value), attr
            assert (record.itemsize, record.is_floating_point) == (
                value.itemsize,
                value.is_floating_point,
            ), attr
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
        "from mfsdp_ckpt.storage.reader import CheckpointReader\n"
        "from mfsdp_ckpt.check.validate import validate_checkpoint\n"
        "from mfsdp_ckpt.check.describe import describe_checkpoint\n"
        "reader = CheckpointReader(sys.argv[2])\n"
        "assert reader.read_tensor('model.w').shape == (6, 4), reader.tensors\n"
        "assert reader.read_object('extra.step') == 1\n"
        "assert validate_checkpoint(sys.argv[2], deep=True).ok()\n"
        "describe_checkpoint(sys.argv[2])\n"
    )
    loaded = modules_after(body, str(dist_ckpt))
    assert loaded == [], f"reading a checkpoint loaded {loaded[:5]}"


def _summary(metadata) -> tuple:
    """What the reader takes from metadata, in plain values, for either class table (dtypes
    and layouts by name: torch's own objects or the plain stand-ins)."""
    items = {
        key: (
            type(item).__name__,
            tuple(getattr(item, "size", ())),
            str(getattr(getattr(item, "properties", None), "dtype", None)),
            str(getattr(getattr(item, "properties", None), "layout", None)),
            [(tuple(c.offsets), tuple(c.sizes)) for c in getattr(item, "chunks", [])],
        )
        for key, item in metadata.state_dict_metadata.items()
    }
    storage = {
        (index.fqn, tuple(index.offset) if index.offset is not None else None): (
            info.relative_path,
            info.offset,
            info.length,
            getattr(info, "transform_descriptors", None),
        )
        for index, info in metadata.storage_data.items()
    }
    return items, storage


def test_plain_metadata_reads_the_same_values_as_dcp(dist_ckpt):
    from torch.distributed.checkpoint.metadata import Metadata

    raw = (dist_ckpt / layout.DCP_METADATA_FILE).read_bytes()
    real, plain = load_metadata_bytes(raw), load_plain_metadata_bytes(raw)
    assert isinstance(real, Metadata) and not isinstance(plain, Metadata)
    assert type(plain).__module__ == "mfsdp_ckpt.format.dcp_metadata"
    assert _summary(plain) == _summary(real)
    assert len(_summary(plain)[1]) == 3  # two tensors and one object, each with its storage entry


def test_cli_root_and_help_import_no_torch():
    """`mfsdp --help`, and every command's early errors, answer in a fraction of a second."""
    assert modules_after("from cli.main import app", roots=("torch", "transformers")) == []
