"""Export a DCP checkpoint (ours, FSDP2, Megatron-FSDP, Megatron-core fsdp_dtensor) to a
Hugging Face model directory, on CPU, in bounded memory.

How it stays small and fast:

* planning first: names are mapped (`name_maps`), every output shape is checked against
  the HF config (for Qwen2/Qwen3/Llama from config.json alone, without importing
  transformers) and the safetensors layout is fixed before a byte of weight is read;
* streaming: a tensor that keeps its name is copied file-to-file in the kernel, or cast
  a 4 MiB piece at a time through per-thread buffers, so it never sits in memory whole;
  a tensor that is split or de-interleaved (mcore QKV, gate/up) is read whole, converted
  and `pwrite`n at its planned offset, under a byte budget of the largest one plus a
  fixed buffer. Peak memory does not grow with the model. Each output file has one
  writer at a time (concurrent writes into one file were slower); other threads read
  and convert meanwhile;
* atomic: everything is written into a hidden sibling directory that is renamed into
  place at the end; any failure or Ctrl-C removes it, so there is never a half export;
* no torch unless a tensor's values change: planning, the kernel copy and every check
  before it use plain dtype records (`mfsdp_ckpt.format.dtypes`). torch is imported where a cast,
  a split or `--verify` first needs it, or a blob is not raw bytes and must be decoded.
  Its import is a start-up cost on the order of `cp`'s whole copy (bench/export_hf.py's
  "start-up + import torch" row, docs/benchmarks.md).
"""

from __future__ import annotations

import errno
import json
import math
import mmap
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.dtypes import BFLOAT16, BY_NAME, FLOAT16, FLOAT32, DType
from mfsdp_ckpt.convert.hf_config import (
    ExpectedWeights,
    MAX_LAYERS,
    HFConfigError,
    check_geometry,
    expected_weights,
    load_hf_config,
    read_config_json,
    weights_from_table,
)
from mfsdp_ckpt.convert.name_maps import (
    COPY,
    LAYOUTS,
    Geometry,
    MappedTensor,
    MappingError,
    ShapeError,
    detect_layout,
    hf_state_dict_shapes,
    map_names,
    model_tensors,
)
from mfsdp_ckpt.storage.out_dir import claim_output
from mfsdp_ckpt.storage.reader import CheckpointReader, TensorEntry, chunk_coverage_problems
from mfsdp_ckpt.storage.safetensors_writer import INDEX_FILE, ShardedSafetensorsWriter
from mfsdp_ckpt.storage.byte_store import ByteStore, CheckpointFileError
from mfsdp_ckpt.storage.tensorstore_store import is_url, join_location, open_store
from mfsdp_ckpt.check.validate import manifest_hash_errors, require_valid
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError

if TYPE_CHECKING:
    import torch

DTYPES = {"bf16": BFLOAT16, "fp16": FLOAT16, "fp32": FLOAT32}
_CONFIG_DTYPES = {dtype.name: dtype for dtype in DTYPES.values()}  # what a config.json string may name
WEIGHT_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".distcp")
WEIGHT_INDEX_FILES = (INDEX_FILE, "pytorch_model.bin.index.json")
MIN_BUFFER_BYTES = 512 << 20

Progress = Callable[[int, int, int, int], None]  # tensors done/total, bytes done/total


class ExportUsageError(MfsdpUsageError, ValueError):
    """What was asked cannot be done as asked (exit 2): output exists, no config, bad layout."""


class ExportError(MfsdpFailedError, ValueError):
    """The checkpoint cannot be exported (exit 1): no model, shapes contradict the config."""


class NonFiniteError(ExportError):
    """A weight holds NaN or Inf (a diverged run), or a cast overflows the export dtype."""


@dataclass
class ExportResult:
    out_dir: str
    layout: str
    model_type: str
    dtype: str
    tensors: int
    bytes: int
    files: list[str]
    seconds: float
    mismatches: list[str] | None = None  # None: not verified
    notes: list[str] = field(default_factory=list)

    @property
    def gb_per_s(self) -> float:
        return self.bytes / 1e9 / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        verified = " verified," if self.mismatches == [] else ""
        return (
            f"exported {self.tensors} tensors, {_human_bytes(self.bytes)} in {self.seconds:.1f} s"
            f" ({self.gb_per_s:.2f} GB/s),{verified} {len(self.files)} file(s), {self.dtype},"
            f" layout {self.layout}, {self.model_type} -> {self.out_dir}"
        )


def _human_bytes(count: int) -> str:
    """GB (decimal, as --max-shard-size) from 1 GB up; MiB below, so that small models
    do not read 0.00 GB."""
    return f"{count / 1e9:.2f} GB" if count >= 10**9 else f"{count / 2**20:.2f} MiB"


def parse_size(text: str) -> int:
    """`5GB`, `500MB`, `2GiB`, `1000000` -> bytes (decimal units as in transformers)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)\s*", text, re.IGNORECASE)
    if not match:
        raise ExportUsageError(f"--max-shard-size {text!r}: expected e.g. 5GB, 500MB or a byte count")
    number, unit = float(match.group(1)), match.group(2).upper().rstrip("B")
    scale = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
             "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}[unit]
    if number * scale < 1:
        raise ExportUsageError(f"--max-shard-size {text!r}: must be at least one byte")
    return int(number * scale)


# --------------------------------------------------------------------------- sources
@dataclass
class _Source:
    """A resolved checkpoint: its store, its reader and where its HF assets are (if any)."""

    location: str
    reader: CheckpointReader
    hf_assets: str | None
    protected: list[Path]  # local dirs the export must never replace


def source_for(paths: layout.CheckpointPaths, reader: CheckpointReader) -> _Source:
    """The export source of a resolved local checkpoint (validate plans with it too)."""
    hf = str(paths.hf_assets) if paths.hf_assets and paths.hf_assets.is_dir() else None
    protected = [
        p.resolve() for p in (paths.dist_ckpt, paths.step_dir, paths.run_dir) if p is not None
    ]
    return _Source(str(paths.dist_ckpt), reader, hf, protected)


def _refuse_critic(paths: layout.CheckpointPaths) -> None:
    if paths.role == "critic":
        raise ExportUsageError(
            f"{paths.dist_ckpt}: the critic's value head is not a language model (no lm_head);"
            " export the actor (--role actor)"
        )


def _resolve_source(ckpt: str, io: str, role: str | None = None) -> _Source:
    if not is_url(ckpt):
        paths = layout.resolve_checkpoint(ckpt, role=role)
        _refuse_critic(paths)
        store = open_store(str(paths.dist_ckpt), io)
        return source_for(paths, CheckpointReader(paths.dist_ckpt, store=store))
    root = open_store(ckpt, io)
    dist_ckpt, step_dir = _resolve_url(ckpt, root)
    reader = CheckpointReader(dist_ckpt, store=open_store(dist_ckpt, io))
    hf = join_location(step_dir, layout.HF_ASSETS_DIR) if step_dir else None
    return _Source(dist_ckpt, reader, hf, [])


def _resolve_url(url: str, root: ByteStore) -> tuple[str, str | None]:
    """The URL twin of layout.resolve_checkpoint: bare dist_ckpt, step dir, or run dir."""
    if root.size(layout.DCP_METADATA_FILE) is not None:
        return url, None
    if root.size(f"{layout.DIST_CKPT_DIR}/{layout.DCP_METADATA_FILE}") is not None:
        return join_location(url, layout.DIST_CKPT_DIR), url
    tracker_size = root.size(layout.TRACKER_FILE)
    if tracker_size is not None:
        text = root.read_range(layout.TRACKER_FILE, 0, tracker_size).decode(errors="replace").strip()
        if not text.isdigit():
            raise layout.CheckpointPathError(f"{url}/{layout.TRACKER_FILE}: expected a step number")
        step = join_location(url, f"{layout.STEP_DIR_PREFIX}{int(text)}")
        return join_location(step, layout.DIST_CKPT_DIR), step
    raise layout.CheckpointPathError(
        f"{url}: not a checkpoint (no {layout.DCP_METADATA_FILE}, no {layout.DIST_CKPT_DIR}/, no {layout.TRACKER_FILE})"
    )


MAX_ASSET_BYTES = 1 << 30  # a tokenizer.json is tens of MB; nothing that is not a weight is larger


def _asset_files(
    location: str, io: str, root: str | os.PathLike | None = None
) -> dict[str, Callable[[], bytes]]:
    """Files of an HF assets dir (config, tokenizer, ...) without weights: name -> loader.

    Local files must be regular files, read bounded through `safe_files`; with `root` (the
    checkpoint, for its own huggingface/ dir) they must also resolve inside it, so a symlink
    that leads out (a user's ~/.ssh/id_rsa copied into the export) is refused in one line
    before anything is written. A --hf-config dir the user names has no such root: a
    Hugging Face cache snapshot is symlinks into ../../blobs by design."""
    if not is_url(location):
        base = Path(location)
        candidates = (
            [("config.json", base)]
            if base.is_file()
            else [
                (relative, base / relative)
                for relative in layout.list_files(base)
                if not _is_weight_file(relative)
            ]
        )
        files = {}
        for name, path in candidates:
            safe_files.regular_file(path, root=root)
            files[name] = lambda path=path: safe_files.read_bytes(path, MAX_ASSET_BYTES, root=root)
        return files
    store = open_store(location, io)
    return {
        name: (lambda name=name: store.read_range(name, 0, store.size(name) or 0))
        for name in store.list_files()
        if not _is_weight_file(name)
    }


def _is_weight_file(name: str) -> bool:
    return name.endswith(WEIGHT_FILE_SUFFIXES) or Path(name).name in WEIGHT_INDEX_FILES


# --------------------------------------------------------------------------- config
class JsonConfig(SimpleNamespace):
    """config.json of a family whose weight shapes `name_maps` knows, kept as plain JSON.

    Export needs only model_type, a few numbers and the dtype; reading them without
    transformers saves its import and a meta-device model (seconds, more than exporting
    a 0.5B model). Any other config goes through transformers as before."""

    hf_shapes: dict[str, tuple[int, ...]]


def load_config(path: str | os.PathLike, max_layers: int = MAX_LAYERS):
    """A `JsonConfig` when name_maps knows the family and every number it needs is in
    the file; otherwise (or for any problem with the file) transformers' config. Sizes
    that are not positive, do not divide, or claim more than `max_layers` layers are
    refused (HFConfigError) before any name is generated from them."""
    try:
        data = read_config_json(path)[1]  # a regular file, bounded: never a FIFO or /dev/zero
    except (OSError, ValueError):
        data = None
    if isinstance(data, dict):
        check_geometry(data, path, max_layers)
    shapes = hf_state_dict_shapes(data) if isinstance(data, dict) else None
    if shapes is None:
        return load_hf_config(path)
    return JsonConfig(**data, hf_shapes=shapes)


def _expected_weights(config) -> ExpectedWeights:
    if not isinstance(config, JsonConfig):
        return expected_weights(config)
    return weights_from_table(config.model_type, config.hf_shapes, bool(config.tie_word_embeddings))


# --------------------------------------------------------------------------- planning
@dataclass
class ExportPlan:
    """Everything decided before a weight is read."""

    source: _Source
    layout: str
    model_type: str
    geometry: Geometry
    items: list[MappedTensor]
    dtype: DType  # floating tensors are written in this dtype
    dtypes: dict[str, DType]  # per target name (integer tensors keep theirs)
    allow_nonfinite: bool = False  # False: a NaN/Inf written out stops the export

    def entry(self, item: MappedTensor) -> TensorEntry:
        return self.source.reader.tensors[item.source]

    def ordered_items(self) -> list[MappedTensor]:
        """Items in the order their bytes lie in the checkpoint files."""
        return sorted(self.items, key=lambda item: _read_order(self.entry(item)))

    def specs(self) -> list[tuple[str, DType, tuple[int, ...]]]:
        """Output tensors in read order, so reads and writes both run front to back
        (safetensors readers do not care about the order inside a file)."""
        return [
            (target, self.dtypes[target], shape)
            for item in self.ordered_items()
            for target, shape in zip(item.targets, item.shapes)
        ]


def _natural_key(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _config_dtype(config) -> DType | None:
    """The dtype a config names: in config.json a string (bfloat16, float16 or float32); in
    a transformers config possibly any torch.dtype, looked up by its name."""
    value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if not value:
        return None
    name = str(value).removeprefix("torch.")
    return _CONFIG_DTYPES.get(name) if isinstance(value, str) else BY_NAME.get(name)


def choose_dtype(requested: str, config, stored: list[TensorEntry]) -> DType:
    """`auto` is the config's dtype (bf16 for Qwen/Llama releases), as verl/HF users expect;
    without one in the config, the checkpoint's own floating dtype."""
    if requested != "auto":
        if requested not in DTYPES:
            raise ExportUsageError(f"--dtype {requested!r}: choose auto, {', '.join(DTYPES)}")
        return DTYPES[requested]
    chosen = _config_dtype(config)
    if chosen is not None:
        return chosen
    floating = Counter(e.dtype for e in stored if e.dtype.is_floating_point)
    return floating.most_common(1)[0][0] if floating else FLOAT32


def plan_export(source: _Source, config, *, layout_name: str = "auto", dtype: str = "auto") -> ExportPlan:
    """Map names, check them against the config, choose output dtypes. Raises before any I/O."""
    if layout_name not in ("auto", *LAYOUTS):
        raise ExportUsageError(f"--layout {layout_name!r}: choose auto, {', '.join(LAYOUTS)}")
    reader = source.reader
    try:
        stored = model_tensors(reader.tensors)
    except MappingError as err:  # two stored names for one weight: the checkpoint is ambiguous
        raise ExportError(f"{source.location}: {err}") from None
    if not stored:
        raise ExportError(f"{source.location}: checkpoint holds no model weights (no model tensors)")
    paths = {path: reader.tensors[key].shape for path, key in stored.items()}
    try:
        chosen_layout = detect_layout(paths) if layout_name == "auto" else layout_name
        geometry = Geometry.from_config(config)
        items = map_names(paths, stored, chosen_layout, config.model_type, geometry)
    except ShapeError as err:
        raise ExportError(f"{source.location} {err}") from None
    except MappingError as err:
        raise ExportUsageError(f"{source.location}: {err}") from None
    _check_against_config(source, config, items, chosen_layout)
    out_dtype = choose_dtype(dtype, config, [reader.tensors[k] for k in stored.values()])
    dtypes = {}
    for item in items:
        src_dtype = reader.tensors[item.source].dtype
        for target in item.targets:
            dtypes[target] = out_dtype if src_dtype.is_floating_point else src_dtype
    return ExportPlan(source, chosen_layout, config.model_type, geometry, items, out_dtype, dtypes)


def _check_against_config(source: _Source, config, items: list[MappedTensor], chosen_layout: str) -> None:
    expected = _expected_weights(config)
    produced = {t: (shape, item.source) for item in items for t, shape in zip(item.targets, item.shapes)}
    unknown = sorted(t for t in produced if t not in expected.allowed)
    if unknown:
        sources = [produced[t][1] for t in unknown]
        raise ExportUsageError(
            f"{source.location}: {len(unknown)} tensor(s) unknown to {config.model_type}"
            f" ({chosen_layout} layout), e.g. {', '.join(sources[:3])}"
        )
    for target, (shape, src) in produced.items():
        if tuple(expected.allowed[target]) != tuple(shape):
            raise ExportError(
                f"{source.location} [{src}]: shape {shape} as {target}, but the config"
                f" ({config.model_type}) says {tuple(expected.allowed[target])}"
            )
    required = set(expected.required)
    for target in sorted(required.intersection(produced), key=_natural_key):
        stored = source.reader.tensors[produced[target][1]].dtype
        if not stored.is_floating_point:
            raise ExportError(
                f"{source.location} [{produced[target][1]}]: stored as {stored.name}, but {target}"
                f" is a floating-point weight of {config.model_type}; refusing to export it"
            )
    if expected.tie_word_embeddings:
        required.discard("lm_head.weight")
    missing = sorted(required - set(produced), key=_natural_key)
    if missing:
        raise ExportError(
            f"{source.location}: checkpoint lacks {len(missing)} weight(s) the config needs, e.g. {missing[0]}"
        )


# --------------------------------------------------------------------------- conversion
def convert(plan: ExportPlan, item: MappedTensor) -> list[tuple[str, torch.Tensor]]:
    """Read one stored tensor and return its HF tensors, cast to the export dtype."""
    tensor = plan.source.reader.read_tensor(item.source)
    outputs = item.transform.apply(tensor, plan.geometry)
    del tensor
    return [(name, value.to(plan.dtypes[name].torch)) for name, value in zip(item.targets, outputs)]


def _task_cost(plan: ExportPlan, item: MappedTensor) -> int:
    """Bytes one task holds at its peak: the stored tensor plus any copies made from it."""
    source = plan.entry(item).nbytes
    copies = item.transform is not COPY or any(plan.dtypes[t] != plan.entry(item).dtype for t in item.targets)
    out = sum(math.prod(shape) * plan.dtypes[t].itemsize for t, shape in zip(item.targets, item.shapes))
    return source + (out if copies else 0)


class _ByteBudget:
    """At most `limit` bytes of tensors in flight; one task may always run alone."""

    def __init__(self, limit: int):
        self.limit, self.in_flight = limit, 0
        self._cond = threading.Condition()

    def acquire(self, cost: int, stop: threading.Event) -> bool:
        """Take `cost` bytes and return True; or, once `stop` is set (a task failed), return
        False having taken nothing, so only a True is ever released."""
        with self._cond:
            while not stop.is_set() and self.in_flight and self.in_flight + cost > self.limit:
                self._cond.wait(0.1)
            if stop.is_set():
                return False
            self.in_flight += cost
            return True

    def release(self, cost: int) -> None:
        with self._cond:
            self.in_flight -= cost
            self._cond.notify_all()


def _run_tasks(
    plan: ExportPlan,
    work: Callable[[MappedTensor], int],
    workers: int,
    buffer_bytes: int,
    progress: Progress | None,
    total_bytes: int,
    cost: Callable[[ExportPlan, MappedTensor], int] = _task_cost,
) -> None:
    """Run `work(item) -> bytes` over the plan in threads under the byte budget."""
    items = plan.ordered_items()
    costs = {item.source: cost(plan, item) for item in items}
    budget = _ByteBudget(max(max(costs.values(), default=0), buffer_bytes))
    stop = threading.Event()
    lock = threading.Lock()
    done = {"tensors": 0, "bytes": 0}

    def task(item: MappedTensor) -> None:
        cost = costs[item.source]
        if not budget.acquire(cost, stop):
            return
        try:
            written = work(item)
        finally:
            budget.release(cost)
        with lock:
            done["tensors"] += 1
            done["bytes"] += written
            if progress is not None:
                progress(done["tensors"], len(items), done["bytes"], total_bytes)

    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="export")
    try:
        futures = [pool.submit(task, item) for item in items]
        finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for future in finished:
            if future.exception() is not None:
                raise future.exception()
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)


_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}
# A cast converts this many elements at a time (4 MiB of fp32 in, 2 MiB of bf16 out): small
# enough that the piece just read is still in cache when it is cast and the cast still in
# cache when it is written.
STREAM_PIECE_ELEMENTS = 1 << 20


def _streamable(plan: ExportPlan, item: MappedTensor) -> bool:
    """Tensors that keep their name layout and sit in dim-0 slabs (how FSDP2 and Megatron-FSDP
    shard) map each chunk to one contiguous byte range of the output, so they can be
    streamed chunk by chunk: copied in the kernel when the dtype stays, cast a piece at a
    time when it changes. Neither holds the tensor in memory."""
    entry = plan.entry(item)
    return (
        item.transform is COPY
        and entry.numel > 0
        and hasattr(plan.source.reader.store, "open_fd")
        and not chunk_coverage_problems(entry)
        and all(c.numel == 0 or (c.offsets[1:] == (0,) * (len(c.offsets) - 1) and c.sizes[1:] == entry.shape[1:])
                for c in entry.chunks)
    )


class _PieceBuffers(threading.local):
    """Per-thread buffers a cast reads into and converts into, allocated once and reused
    (fresh allocations cost page faults that, on this kind of VM, cost more than the copy).
    `nonfinite` counts the NaN/Inf the last cast wrote; `overflow` says its source was
    finite, so the values were out of the export dtype's range."""

    nonfinite = 0
    overflow = False

    def get(self, source_bytes: int, target_bytes: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        if getattr(self, "source", None) is None or self.source.numel() < source_bytes:
            self.source = torch.empty(source_bytes, dtype=torch.uint8)
        if getattr(self, "target", None) is None or self.target.numel() < target_bytes:
            self.target = torch.empty(target_bytes, dtype=torch.uint8)
        return self.source, self.target


def _stream(plan: ExportPlan, item: MappedTensor, writer: ShardedSafetensorsWriter, buffers: _PieceBuffers) -> bool:
    """Stream one `_streamable` tensor into place; False (nothing claimed) when a blob is not
    plain raw bytes or the kernel/filesystem cannot copy, so the caller decodes instead."""
    reader, entry = plan.source.reader, plan.entry(item)
    chunks = [c for c in entry.chunks if c.numel]
    offsets = [reader.raw_payload_offset(entry, c) for c in chunks]
    if any(offset is None for offset in offsets):
        return False
    name, out_dtype = item.targets[0], plan.dtypes[item.targets[0]]
    row = entry.numel // entry.shape[0] if entry.shape else 1  # elements per dim-0 row
    try:
        for index, (chunk, offset) in enumerate(zip(chunks, offsets)):
            fd = reader.store.open_fd(chunk.file)
            try:
                _check_size(fd, offset + chunk.numel * entry.dtype.itemsize, reader.root / chunk.file)
                start, done = (chunk.offsets[0] * row if entry.shape else 0), index == len(chunks) - 1
                if out_dtype == entry.dtype:
                    size = entry.dtype.itemsize
                    if not plan.allow_nonfinite:
                        _check_finite_range(plan, item, fd, offset, chunk.numel)
                    writer.copy_range(name, fd, offset, start * size, chunk.numel * size, done=done)
                else:
                    _cast_range(fd, offset, entry.dtype, chunk.numel, writer, name, start, out_dtype, done, buffers,
                                reader.root / chunk.file)
                    if not plan.allow_nonfinite and buffers.nonfinite:
                        raise _nonfinite(plan, item, buffers.nonfinite, buffers.overflow)
            finally:
                os.close(fd)
    except OSError as err:
        if err.errno in _NO_KERNEL_COPY:
            return False
        raise
    return True


# Checked on the raw bytes, so the kernel-copy path needs neither torch nor a copy: numpy's
# isfinite for the types it has; for bfloat16, all exponent bits set (Inf or NaN). fp8
# formats are not checked.
_NUMPY_FLOATS = {"float64": "<f8", "float32": "<f4", "float16": "<f2"}
_BF16_EXPONENT = 0x7F80


def _count_nonfinite(data: memoryview, dtype: DType) -> int:
    import numpy as np

    if dtype.name in _NUMPY_FLOATS:
        values = np.frombuffer(data, dtype=_NUMPY_FLOATS[dtype.name])
        return 0 if np.isfinite(values).all() else int(np.count_nonzero(~np.isfinite(values)))
    if dtype.name == "bfloat16":
        exponent = np.frombuffer(data, dtype="<u2") & np.uint16(_BF16_EXPONENT)
        return int(np.count_nonzero(exponent == _BF16_EXPONENT))
    return 0


def _check_finite_range(
    plan: ExportPlan, item: MappedTensor, fd: int, offset: int, numel: int
) -> None:
    """NonFiniteError when `numel` raw elements at `offset` of `fd` hold NaN/Inf; the bytes
    are mapped a piece at a time (they are read into the page cache the copy then uses)."""
    dtype = plan.entry(item).dtype
    if numel == 0 or dtype.name not in (*_NUMPY_FLOATS, "bfloat16"):
        return
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    length = offset + numel * dtype.itemsize - start
    with mmap.mmap(fd, length, prot=mmap.PROT_READ, offset=start) as mapped:
        view, step = memoryview(mapped), STREAM_PIECE_ELEMENTS * dtype.itemsize
        try:
            found = sum(_count_nonfinite(view[first:min(first + step, length)], dtype)
                        for first in range(offset - start, length, step))
        finally:
            view.release()
    if found:
        raise _nonfinite(plan, item, found, overflow=False)


def _nonfinite(
    plan: ExportPlan, item: MappedTensor, count: int, overflow: bool | None
) -> NonFiniteError:
    """`overflow`: the source was finite (True), was not (False), or is not known (None)."""
    what = {True: f"overflows {plan.dtype.name} ({count} value(s) become Inf)",
            False: f"holds {count} NaN/Inf value(s) (a diverged run?)",
            None: f"has {count} NaN/Inf value(s) as {plan.dtype.name}"}[overflow]
    return NonFiniteError(
        f"{plan.source.location} [{item.source}]: {what}; --allow-nonfinite exports it anyway")


def _check_size(fd: int, needed: int, path: Path) -> None:
    size = os.fstat(fd).st_size
    if size < needed:
        raise CheckpointFileError(f"{path}: needs {needed} bytes but the file has {size} (truncated?)")


def _cast_range(fd: int, offset: int, dtype: DType, numel: int, writer: ShardedSafetensorsWriter, name: str,
                start: int, out_dtype: DType, done: bool, buffers: _PieceBuffers, path: Path) -> None:
    """Read `numel` raw `dtype` elements at `offset` of `fd` and write them cast to `out_dtype`
    at element `start` of `name`, a bounded piece at a time (torch rounds as `.to()` does)."""
    import torch

    source, target = buffers.get(STREAM_PIECE_ELEMENTS * dtype.itemsize, STREAM_PIECE_ELEMENTS * out_dtype.itemsize)
    buffers.nonfinite, buffers.overflow = 0, True
    for first in range(0, numel, STREAM_PIECE_ELEMENTS):
        count = min(STREAM_PIECE_ELEMENTS, numel - first)
        raw = source[: count * dtype.itemsize]
        _pread_exact(fd, memoryview(raw.numpy()), offset + first * dtype.itemsize, path)
        cast = target[: count * out_dtype.itemsize].view(out_dtype.torch)
        cast.copy_(raw.view(dtype.torch))
        finite = torch.isfinite(cast)  # one pass over bytes still in cache
        if not bool(finite.all()):
            buffers.nonfinite += int((~finite).sum())
            source_finite = bool(torch.isfinite(raw.view(dtype.torch)).all())
            buffers.overflow = buffers.overflow and source_finite
        last = done and first + count == numel
        writer.write_range(name, memoryview(cast.view(torch.uint8).numpy()), (start + first) * out_dtype.itemsize, last)


def _pread_exact(fd: int, buffer: memoryview, offset: int, path: Path) -> None:
    done = 0
    while done < len(buffer):
        count = os.preadv(fd, [buffer[done:]], offset + done)
        if count <= 0:
            raise CheckpointFileError(f"{path}: unexpected end of file at byte {offset + done} (truncated?)")
        done += count


def _read_order(entry: TensorEntry) -> tuple:
    first = min((c for c in entry.chunks if c.file), key=lambda c: (c.file, c.file_offset), default=None)
    return (first.file, first.file_offset) if first else ("", 0)


# --------------------------------------------------------------------------- export
def _check_out_dir(out: Path, protected: list[Path]) -> None:
    resolved = out.resolve()
    for keep in protected:
        if resolved == keep or resolved in keep.parents:
            raise ExportUsageError(f"{out}: holds the checkpoint being exported; choose another --out")
    inside = layout.checkpoint_containing(resolved)
    if inside is not None:
        raise ExportUsageError(
            f"{out}: lies inside the checkpoint {inside}; choose an --out outside it"
            " (--overwrite replaces only an empty directory or an earlier export)"
        )


# How many more layers config.json may name than the checkpoint's names hold; a few more
# get the "checkpoint lacks weights" message that names one, many more are refused early.
LAYER_TOLERANCE = 8
_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _layer_cap(source: _Source) -> int:
    """The most layers config.json may claim for this checkpoint: the layer indices its
    weight names hold plus a tolerance, and never above hf_config.MAX_LAYERS."""
    found = (_LAYER_INDEX.search(name) for name in source.reader.tensors)
    indices = {int(match.group(1)) for match in found if match}
    return min(MAX_LAYERS, len(indices) + LAYER_TOLERANCE)


def _check_backed(plan: ExportPlan) -> None:
    """Every chunk the plan reads lies inside its file and can hold its elements, so the
    sizes the output reserves are backed by real bytes (metadata claiming 1 TiB over a
    1 KB blob must not make export reserve 1 TiB of disk first)."""
    reader = plan.source.reader
    for item in plan.items:
        entry = plan.entry(item)
        for chunk in entry.chunks:
            if chunk.numel:
                reader._check_stored(entry, chunk)


def _write_assets(assets: dict[str, Callable[[], bytes]], target: Path) -> None:
    for name, load in assets.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(load())


def _set_config_dtype(config_file: Path, dtype: DType) -> None:
    """The exported config names the dtype actually written, as save_pretrained does."""
    data = json.loads(config_file.read_text())
    data["dtype"] = dtype.name
    if "torch_dtype" in data:
        data["torch_dtype"] = dtype.name
    config_file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def export_hf(
    ckpt: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    dtype: str = "auto",
    max_shard_size: int = 5 * 10**9,
    hf_config: str | os.PathLike | None = None,
    layout_name: str = "auto",
    workers: int = 4,
    verify: bool = False,
    overwrite: bool = False,
    io: str = "auto",
    buffer_bytes: int = MIN_BUFFER_BYTES,
    progress: Progress | None = None,
    role: str | None = None,
    allow_nonfinite: bool = False,
    adapter_only: bool = False,
) -> ExportResult:
    """Convert `ckpt` (any level of any layout `layout.resolve_checkpoint` reads, or a URL)
    into `out_dir`; `role` picks verl's actor (default) or critic (refused: not an LM).

    A LoRA checkpoint is merged onto its base model, or with `adapter_only` written as a
    PEFT adapter dir (`mfsdp_ckpt.convert.lora_export`).

    Raises ExportUsageError / CheckpointPathError / OutputDirError (bad usage), ExportError
    (NonFiniteError: a weight holds NaN/Inf, unless `allow_nonfinite`),
    CheckpointFormatError / CheckpointFileError / UnsafeMetadataError (bad checkpoint),
    OSError (disk full, unwritable). On any failure nothing is left at `out_dir`, and
    `overwrite` replaces only an empty directory or an earlier export (`out_dir.py`).
    """
    from mfsdp_ckpt.convert.lora_export import export_lora, lora_manifest  # it builds on this module

    if adapter_only or lora_manifest(ckpt) is not None:
        return export_lora(
            ckpt, out_dir, adapter_only=adapter_only, dtype=dtype, max_shard_size=max_shard_size,
            hf_config=hf_config, verify=verify, overwrite=overwrite, progress=progress,
        )
    started = time.monotonic()
    out = Path(out_dir)
    source = _resolve_source(str(ckpt), io, role)
    _check_out_dir(out, source.protected)
    asset_location = str(hf_config) if hf_config is not None else source.hf_assets
    if asset_location is None:
        raise ExportUsageError(
            f"{source.location}: the checkpoint has no {layout.HF_ASSETS_DIR}/ dir; pass --hf-config DIR|config.json"
        )
    if hf_config is not None and not Path(hf_config).exists():
        raise ExportUsageError(f"{hf_config}: no such file or directory (--hf-config)")
    local_paths = None if is_url(str(ckpt)) else layout.resolve_checkpoint(ckpt, role=role)
    asset_root = local_paths.root if local_paths is not None and hf_config is None else None
    assets = _asset_files(asset_location, io, asset_root)
    if "config.json" not in assets:
        raise ExportUsageError(f"{asset_location}: no config.json; pass --hf-config DIR|config.json")
    if local_paths is not None:  # damaged or hostile: refused with validate's first error, before planning
        require_valid(local_paths, manifest_only=True)
    claim = claim_output(out, overwrite)
    tmp = claim.tmp
    writer: ShardedSafetensorsWriter | None = None
    try:
        _write_assets(assets, tmp)
        try:
            config = load_config(tmp / "config.json", _layer_cap(source))
        except HFConfigError as err:
            raise ExportUsageError(str(err).replace(str(tmp / "config.json"), f"{asset_location} config.json")) from None
        plan = plan_export(source, config, layout_name=layout_name, dtype=dtype)
        plan.allow_nonfinite = allow_nonfinite
        _check_backed(plan)  # before the output files reserve the plan's bytes
        writer = ShardedSafetensorsWriter(tmp, plan.specs(), max_shard_size)
        writer.open()

        streamable = {item.source for item in plan.items if _streamable(plan, item)}
        buffers = _PieceBuffers()

        def work(item: MappedTensor) -> int:
            if item.source in streamable and _stream(plan, item, writer, buffers):
                return writer.slots[item.targets[0]].nbytes
            written = 0
            for name, tensor in convert(plan, item):
                finite = tensor.isfinite() if tensor.is_floating_point() else None
                if not allow_nonfinite and finite is not None and not bool(finite.all()):
                    raise _nonfinite(plan, item, int((~finite).sum()), overflow=None)
                writer.write(name, tensor)
                written += tensor.nbytes
            return written

        def cost(plan: ExportPlan, item: MappedTensor) -> int:  # streams hold only their thread's buffers
            return 0 if item.source in streamable else _task_cost(plan, item)

        _run_tasks(plan, work, workers, buffer_bytes, progress, writer.total_bytes, cost)
        writer.close()
        _set_config_dtype(tmp / "config.json", plan.dtype)
        for name in assets:
            layout.fsync_path(tmp / name)
        mismatches = verify_export(plan, tmp, workers=workers, buffer_bytes=buffer_bytes) if verify else None
        if verify and local_paths is not None:  # bytes flipped after save match their own reads: hash them
            mismatches = manifest_hash_errors(local_paths, workers=workers) + mismatches
        if mismatches:
            raise ExportVerifyError(mismatches)
        claim.publish()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        claim.release()
    notes = [local_paths.note] if local_paths is not None and local_paths.note else []
    if not any(name.startswith("tokenizer") for name in assets):
        notes.append(f"no tokenizer files in {asset_location}; AutoTokenizer will not load {out}")
    return ExportResult(
        out_dir=str(out),
        layout=plan.layout,
        model_type=plan.model_type,
        dtype=plan.dtype.name,
        tensors=len(writer.slots),
        bytes=writer.total_bytes,
        files=sorted(writer.files),
        seconds=time.monotonic() - started,
        mismatches=mismatches,
        notes=notes,
    )


class ExportVerifyError(ExportError):
    """--verify found written tensors that differ from their source."""

    def __init__(self, mismatches: list[str]):
        self.mismatches = mismatches
        shown = "; ".join(mismatches[:3]) + (f" (+{len(mismatches) - 3} more)" if len(mismatches) > 3 else "")
        super().__init__(f"verify: {len(mismatches)} mismatch(es): {shown}")


# --------------------------------------------------------------------------- verify
def verify_export(
    plan: ExportPlan, out_dir: str | os.PathLike, *, workers: int = 4, buffer_bytes: int = MIN_BUFFER_BYTES
) -> list[str]:
    """Re-open the written safetensors and compare every tensor, bit for bit, with its
    source after conversion and cast. Returns one line per problem (empty: all equal)."""
    import torch
    from safetensors import SafetensorError, safe_open

    out = Path(out_dir)
    where = _written_files(out)
    problems: list[str] = []
    expected = {name for item in plan.items for name in item.targets}
    problems += [f"{name}: missing from {out}" for name in sorted(expected - set(where), key=_natural_key)]
    problems += [f"{name}: in {where[name]} but not in the checkpoint" for name in sorted(set(where) - expected)]
    lock = threading.Lock()

    def work(item: MappedTensor) -> int:
        found = []
        for name, wanted in convert(plan, item):
            if name not in where:
                continue
            try:
                with safe_open(str(out / where[name]), framework="pt") as handle:
                    written = handle.get_tensor(name)
            except (SafetensorError, OSError) as err:
                found.append(f"{name}: unreadable in {where[name]} ({err})")
                continue
            if written.dtype != wanted.dtype or written.shape != wanted.shape:
                found.append(f"{name}: {tuple(written.shape)} {written.dtype} written, {tuple(wanted.shape)} {wanted.dtype} expected")
            elif not torch.equal(_bits(written), _bits(wanted)):
                differing = int((_bits(written) != _bits(wanted)).sum())
                found.append(f"{name}: {differing} byte(s) differ from {item.source} in {where[name]}")
        with lock:
            problems.extend(found)
        return sum(math.prod(s) for s in item.shapes)

    _run_tasks(plan, work, workers, buffer_bytes, None, 0)
    return problems


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    import torch

    return tensor.contiguous().reshape(-1).view(torch.uint8)


def _written_files(out: Path) -> dict[str, str]:
    """{tensor name: file} from the index, or from the single file's header."""
    from safetensors import safe_open

    index = out / INDEX_FILE
    if index.is_file():
        return dict(json.loads(index.read_text())["weight_map"])
    files = sorted(out.glob("*.safetensors"))
    mapping = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            mapping.update({name: file.name for name in handle.keys()})
    return mapping


def verify_export_dir(
    ckpt: str | os.PathLike, out_dir: str | os.PathLike, *, layout_name: str = "auto", io: str = "auto", workers: int = 4
) -> list[str]:
    """Verify an existing export against its checkpoint, using the export's own config.json
    (so the dtype is the one written)."""
    source = _resolve_source(str(ckpt), io)
    try:
        config = load_config(Path(out_dir) / "config.json")
    except HFConfigError as err:
        raise ExportUsageError(str(err)) from None
    return verify_export(plan_export(source, config, layout_name=layout_name), out_dir, workers=workers)


__all__ = [
    "DTYPES",
    "ExportError",
    "ExportPlan",
    "ExportResult",
    "ExportUsageError",
    "ExportVerifyError",
    "choose_dtype",
    "convert",
    "export_hf",
    "parse_size",
    "plan_export",
    "verify_export",
    "verify_export_dir",
]
