"""Import a Hugging Face safetensors model as a DCP checkpoint, on CPU, in bounded memory.

Two target layouts (`name_maps.plan_import` decides the names):

* ``mcore``: the model entries Megatron-LM, Megatron-Bridge and verl write for Megatron-FSDP
  (`--ckpt-format fsdp_dtensor`): `model.module.decoder.layers.N...`, QKV interleaved per
  query group, SwiGLU fc1 as `weight_w`/`weight_v`, plus Megatron-LM's top-level
  `checkpoint_version` (3.0) and `iteration` (0). OUT is the DCP directory itself
  (`.metadata` + `__0_0.distcp`), what Megatron-LM keeps in `iter_0000000/` or `release/`
  and verl in `dist_ckpt/`. Norm names follow the local layer spec by default
  (`input_layernorm`, `pre_mlp_layernorm`), as Megatron-core without Transformer Engine
  writes them; `norms="te"` writes TE's fused `layer_norm_weight` names instead.
* ``hf``: our own run layout: `OUT/global_step_0/{dist_ckpt/, huggingface/, manifest.json}`
  and the tracker, weights under their transformers names, so training starts from it
  (`model.path=OUT`) and every `mfsdp ckpt` command reads it.

Planning (names, shapes against config.json, dtypes) happens before a weight is read.
Each tensor is then read with one `pread` (`SafetensorsSource`), merged if the layout
fuses it (QKV), cast if asked, and appended to the data file (`StreamingDcpWriter`):
peak memory is the largest tensor group (q, k, v and their fusion) plus a constant.
Everything is built in a hidden sibling of OUT and renamed into place at the end, through
export's own output-directory handling: a failure leaves nothing at OUT.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mfsdp_ckpt import layout
from mfsdp_ckpt.dtypes import DType
from mfsdp_ckpt.export_hf import (
    DTYPES,
    ExportUsageError,
    Progress,
    _asset_files,
    _check_out_dir,
    load_config,
)
from mfsdp_ckpt.hf_config import HFConfigError, expected_weights_for
from mfsdp_ckpt.manifest import FileRecord, Manifest, hash_files
from mfsdp_ckpt.name_maps import (
    HF,
    LAYOUTS,
    MCORE,
    MCORE_IMPORT_FAMILIES,
    MCORE_NORMS,
    Geometry,
    ImportItem,
    MappingError,
    ShapeError,
    plan_import,
)
from mfsdp_ckpt.names import MODEL_KEY_PREFIX
from mfsdp_ckpt.safetensors_source import SafetensorsError, SafetensorsSource

MCORE_MODEL_PREFIX = "module."  # Megatron-LM's model state dict sits under the DDP/FSDP wrapper
MCORE_CHECKPOINT_VERSION = 3.0  # what megatron/training/checkpointing.py writes today
IMPORT_STRATEGY = "import"  # manifest `strategy` of an import: no training run wrote it


class ImportUsageError(ExportUsageError):
    """What was asked cannot be done as asked (exit 2): no model there, output exists, bad option."""


class ImportFailedError(ValueError):
    """The model cannot be imported (exit 1): unreadable weights, shapes the config contradicts."""


@dataclass
class ImportResult:
    out_dir: str
    layout: str
    model_type: str
    dtype: str
    tensors: int
    bytes: int
    seconds: float
    checkpoint: str  # the DCP directory written (OUT itself for mcore)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        rate = self.bytes / 1e9 / self.seconds if self.seconds else 0.0
        return (
            f"imported {self.tensors} tensors, {self.bytes / 2**20:.1f} MiB in {self.seconds:.1f} s"
            f" ({rate:.2f} GB/s), {self.dtype}, layout {self.layout}, {self.model_type} -> {self.out_dir}"
        )


@dataclass
class ImportPlan:
    source: SafetensorsSource
    layout: str
    model_type: str
    geometry: Geometry
    items: list[ImportItem]
    dtype: DType | None  # None: every tensor keeps its stored dtype

    def out_dtype(self, item: ImportItem) -> DType:
        stored = self.source.tensors[item.sources[0]].dtype
        return self.dtype if self.dtype is not None and stored.is_floating_point else stored

    def nbytes(self, item: ImportItem) -> int:
        return math.prod(item.shape) * self.out_dtype(item).itemsize

    def state_path(self, item: ImportItem) -> tuple[str, str]:
        """The nested state-dict path the tensor is saved under: ("model", module path)."""
        prefix = MCORE_MODEL_PREFIX if self.layout == MCORE else ""
        return (MODEL_KEY_PREFIX.rstrip("."), prefix + item.target)


def plan_model_import(hf_dir: Path, *, layout_name: str = MCORE, dtype: str = "auto",
                      norms: str = "local") -> ImportPlan:
    """Read config and safetensors headers, map names, check shapes; no weight is read."""
    if layout_name not in LAYOUTS:
        raise ImportUsageError(f"--layout {layout_name!r}: choose {', '.join(LAYOUTS)}")
    if norms not in MCORE_NORMS:
        raise ImportUsageError(f"--mcore-norms {norms!r}: choose {', '.join(MCORE_NORMS)}")
    if dtype != "auto" and dtype not in DTYPES:
        raise ImportUsageError(f"--dtype {dtype!r}: choose auto, {', '.join(DTYPES)}")
    if not hf_dir.is_dir():
        raise ImportUsageError(f"{hf_dir}: no such directory (give a Hugging Face model dir)")
    if not (hf_dir / "config.json").is_file():
        raise ImportUsageError(f"{hf_dir}: no config.json; not a Hugging Face model dir")
    try:
        config = load_config(hf_dir / "config.json")
        if config.model_type not in MCORE_IMPORT_FAMILIES:
            raise ImportUsageError(f"{hf_dir}: model family {config.model_type!r} has no mcore name table"
                                   f" (import-hf reads {', '.join(sorted(MCORE_IMPORT_FAMILIES))})")
        expected = expected_weights_for(hf_dir)
        source = SafetensorsSource(hf_dir)
    except HFConfigError as err:
        raise ImportUsageError(str(err)) from None
    except SafetensorsError as err:
        raise ImportFailedError(str(err)) from None
    shapes = {name: entry.shape for name, entry in source.tensors.items()}
    _check_against_config(hf_dir, shapes, expected)
    geometry = Geometry.from_config(config)
    try:
        items = plan_import(shapes, layout_name, config.model_type, geometry, norms)
    except ShapeError as err:
        raise ImportFailedError(f"{hf_dir} {err}") from None
    except MappingError as err:
        raise ImportUsageError(f"{hf_dir}: {err}") from None
    return ImportPlan(source, layout_name, config.model_type, geometry, items,
                      None if dtype == "auto" else DTYPES[dtype])


def _check_against_config(hf_dir: Path, shapes: dict[str, tuple[int, ...]], expected) -> None:
    unknown = sorted(name for name in shapes if name not in expected.allowed)
    if unknown:
        raise ImportFailedError(f"{hf_dir}: {len(unknown)} tensor(s) unknown to {expected.model_type}, e.g. {unknown[0]}")
    for name, shape in shapes.items():
        if tuple(expected.allowed[name]) != tuple(shape):
            raise ImportFailedError(f"{hf_dir} [{name}]: shape {tuple(shape)}, but config.json says"
                               f" {tuple(expected.allowed[name])}")
    missing = sorted(set(expected.required) - set(shapes))
    if missing:
        raise ImportFailedError(f"{hf_dir}: weights lack {len(missing)} tensor(s) config.json needs, e.g. {missing[0]}")


def _convert(plan: ImportPlan, item: ImportItem):
    """Read the item's source tensors, merge them and cast: the tensor to write."""
    sources = [plan.source.read(name) for name in item.sources]
    tensor = item.merge.apply(sources, plan.geometry)
    del sources
    return tensor.to(plan.out_dtype(item).torch)


def _write_model(plan: ImportPlan, dist_ckpt: Path, progress: Progress | None) -> tuple[dict[str, FileRecord], int]:
    from mfsdp_ckpt.dcp_stream_writer import StreamingDcpWriter

    writer = StreamingDcpWriter(dist_ckpt)
    total = sum(plan.nbytes(item) for item in plan.items)
    written = 0
    try:
        for index, item in enumerate(plan.items):
            writer.add_tensor(plan.state_path(item), _convert(plan, item))
            written += plan.nbytes(item)
            if progress is not None:
                progress(index + 1, len(plan.items), written, total)
        if plan.layout == MCORE:
            writer.add_object(("checkpoint_version",), MCORE_CHECKPOINT_VERSION)
            writer.add_object(("iteration",), 0)
        records = writer.finish()
    except BaseException:
        writer.abort()
        raise
    return records, written


def import_hf(
    hf_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    layout_name: str = MCORE,
    dtype: str = "auto",
    norms: str = "local",
    overwrite: bool = False,
    progress: Progress | None = None,
) -> ImportResult:
    """Convert the safetensors model in `hf_dir` into a DCP checkpoint at `out_dir`.

    Raises ImportUsageError (bad usage: exit 2), ImportFailedError (unreadable or inconsistent
    model: exit 1), OSError (disk full, unwritable). On any failure nothing is left at OUT.
    """
    started = time.monotonic()
    source_dir, out = Path(hf_dir), Path(out_dir)
    plan = plan_model_import(source_dir, layout_name=layout_name, dtype=dtype, norms=norms)
    _check_out_dir(out, overwrite, [source_dir.resolve()])
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.import-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the result is an ordinary directory
    try:
        if plan.layout == MCORE:
            _, written = _write_model(plan, tmp, progress)
            checkpoint = out
        else:
            written = _write_run_dir(plan, source_dir, tmp, started, progress)
            checkpoint = layout.step_dir(out, 0) / layout.DIST_CKPT_DIR
        layout.fsync_path(tmp)
        layout.replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    notes = []
    if plan.layout == MCORE:
        notes.append("config and tokenizer are not part of an mcore checkpoint: pass"
                     f" --hf-config {source_dir} to export-hf, validate and training")
    dtypes = sorted({plan.out_dtype(item).name for item in plan.items})
    return ImportResult(str(out), plan.layout, plan.model_type, "+".join(dtypes), len(plan.items), written,
                        time.monotonic() - started, str(checkpoint), notes)


def _write_run_dir(plan: ImportPlan, hf_dir: Path, run: Path, started: float, progress: Progress | None) -> int:
    """Our layout: step 0 with dist_ckpt, huggingface/ (config, tokenizer), manifest, tracker."""
    from mfsdp_ckpt.checkpointer import _versions

    step = layout.step_dir(run, 0)
    records, written = _write_model(plan, step / layout.DIST_CKPT_DIR, progress)
    files = {f"{layout.DIST_CKPT_DIR}/{name}": record for name, record in records.items() if record is not None}
    unhashed = [f"{layout.DIST_CKPT_DIR}/{name}" for name, record in records.items() if record is None]
    assets = step / layout.HF_ASSETS_DIR
    assets.mkdir()
    for name, load in _asset_files(str(hf_dir), "local").items():
        target = assets / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(load())
        layout.fsync_path(target)
    asset_names = [str(p.relative_to(step)) for p in sorted(assets.rglob("*")) if p.is_file()]
    files.update(hash_files(step, asset_names + unhashed))
    manifest = Manifest(
        step=0,
        world_size=1,
        strategy=IMPORT_STRATEGY,
        contents=["model"],
        files=dict(sorted(files.items())),
        model_family=plan.model_type,
        versions=_versions(),
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        save_seconds=round(time.monotonic() - started, 3),
        info={"imported_from": str(hf_dir.resolve())},
    )
    with open(step / layout.MANIFEST_FILE, "w") as handle:
        handle.write(manifest.to_json())
        handle.flush()
        os.fsync(handle.fileno())
    layout.fsync_path(step)
    layout.write_tracker(run, 0)
    return written


__all__ = ["ImportFailedError", "ImportPlan", "ImportResult", "ImportUsageError", "import_hf", "plan_model_import"]
