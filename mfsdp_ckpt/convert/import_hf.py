"""Import a Hugging Face safetensors model as a DCP checkpoint, on CPU, in bounded memory.

Two target layouts (`name_maps.plan_import` decides the names):

* ``mcore``: the model entries Megatron-LM, Megatron-Bridge and verl write for Megatron-FSDP
  (`--ckpt-format fsdp_dtensor`): `model.module.decoder.layers.N...`, QKV interleaved per
  query group, SwiGLU fc1 as `weight_w`/`weight_v`, plus Megatron-LM's top-level entries
  (`MCORE_TOP_LEVEL`: `args` None, `checkpoint_version` 3.0, `iteration` 0). OUT is the DCP
  directory itself
  (`.metadata` + `__0_0.distcp`), what Megatron-LM keeps in `iter_0000000/` or `release/`
  and verl in `dist_ckpt/`. Norm names follow the local layer spec by default
  (`input_layernorm`, `pre_mlp_layernorm`), as Megatron-core without Transformer Engine
  writes them; `norms="te"` writes TE's fused `layer_norm_weight` names instead. An MoE
  model's router and experts (global ids) are written as TEGroupedMLP's
  `experts.linear_fc1.weight<E>_w/_v` (`experts="grouped"`, the Transformer Engine spec
  with --moe-grouped-gemm) or SequentialMLP's `experts.local_experts.<E>.` names; by
  default those of the spec the norm names are (`default_experts`).
* ``hf``: our own run layout: `OUT/global_step_0/{dist_ckpt/, huggingface/, manifest.json}`
  and the tracker, weights under their transformers names, so training starts from it
  (`model.path=OUT`) and every `mfsdp ckpt` command reads it. A tied `lm_head.weight` (the
  model's state dict names it) is a key whose storage entry names the embedding's bytes:
  stored once, loaded by any DCP reader as the embedding's values.

Planning (names, shapes against config.json, dtypes) happens before a weight is read,
from the safetensors headers alone (`SafetensorsSource`). Then each tensor becomes a
`torch.save` blob in one of the data files (`StreamingDcpWriter`, one thread per file,
largest tensors placed first so the threads end together): when its dtype stays, its
bytes go file to file in the kernel (`copy_file_range`; a QKV fusion is a permutation of
whole rows, so a few range copies), without torch and without passing through this
process's memory, hashed piece by piece right after each copy when the layout keeps a
manifest; only a `--dtype` cast reads the tensor, a window at a time into the tensor to
write in its output dtype (`import_cast`), and merges it in torch. Peak memory is flat (tens
of MiB) without a cast, and with one the largest tensor group in the output dtype (q, k, v
and their fusion) plus a window, whichever way it casts. Everything is built in a
hidden sibling of OUT and renamed into place at the end, through export's own
output-directory checks: a failure leaves nothing at OUT.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import math
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.convert import stored_buffers, tied_head
from mfsdp_ckpt.convert.asset_rewrites import (
    CODE_KEY,
    CODE_NAMING_FILES,
    code_map,
    code_map_words,
)
from mfsdp_ckpt.convert.conversion_result import ConversionResult
from mfsdp_ckpt.convert.export_errors import ExportUsageError, StoredDtypeError
from mfsdp_ckpt.convert.export_plan import DTYPES
from mfsdp_ckpt.convert.export_prepare import check_out_dir
from mfsdp_ckpt.convert.export_scheduler import Progress
from mfsdp_ckpt.convert.export_source import (
    MAX_JSON_ASSET_BYTES,
    asset_files,
    check_generation_config_beside,
    check_local_assets,
    load_config,
)
from mfsdp_ckpt.convert.export_write import set_config_dtype
from mfsdp_ckpt.convert.fused_experts import hub_expert_entries
from mfsdp_ckpt.convert.fused_tensors import Geometry
from mfsdp_ckpt.convert.hf_config import (
    HFConfigError,
    expected_weights_for,
    read_config_json,
    refuse_quantized,
    refuse_unloadable,
    weights_disagreement,
)
from mfsdp_ckpt.convert.import_cast import CastProgress, read_cast
from mfsdp_ckpt.convert.mapping_errors import MappingError, ShapeError, UnsupportedModelError
from mfsdp_ckpt.convert.megatron_record import read_args
from mfsdp_ckpt.convert.name_maps import (
    DEFAULT_NORMS,
    HF,
    LAYOUTS,
    MCORE,
    MCORE_EXPERTS,
    MCORE_IMPORT_FAMILIES,
    MCORE_NORMS,
    MOE_FAMILIES,
    ImportItem,
    default_experts,
    plan_import,
    refuse_attention_window,
    refuse_mixed_moe_layers,
    refuse_other_computation,
)
from mfsdp_ckpt.convert.weight_dtype import refuse_non_float
from mfsdp_ckpt.errors import MfsdpError, MfsdpFailedError
from mfsdp_ckpt.format import dir_entries, finding_runs, layout, step_saving
from mfsdp_ckpt.format.dtypes import DType
from mfsdp_ckpt.format.file_hash import FileRecord, hash_files
from mfsdp_ckpt.format.finite import count_nonfinite_tensor
from mfsdp_ckpt.format.foreign_formats import peft_adapter_line
from mfsdp_ckpt.format.hub_id import hub_id_hint
from mfsdp_ckpt.format.manifest import Manifest, read_manifest
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.format.output_inside import inside_checkpoint
from mfsdp_ckpt.format.state_keys import MODEL_KEY_PREFIX
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.dcp_stream_writer import (
    BlobTooLargeError,
    SourceRange,
    StreamingDcpWriter,
)
from mfsdp_ckpt.storage.named_writes import write_bytes
from mfsdp_ckpt.storage.out_dir import Replaceable, claim_output, unreplaceable
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.safetensors_source import (
    SafetensorsError,
    SafetensorsSource,
    export_hf_advice,
)
from mfsdp_ckpt.storage.writable import require_writable_dir

if TYPE_CHECKING:
    import torch

MCORE_MODEL_PREFIX = "module."  # Megatron-LM's model state dict sits under the DDP/FSDP wrapper
MCORE_CHECKPOINT_VERSION = 3.0  # what megatron/training/checkpointing.py writes today
# Megatron-LM's top-level entries beside the model. Its first read of every fsdp_dtensor
# --load (checkpointing.py `_load_base_checkpoint(rank0=True)`) loads exactly these three
# keys, strictly: a missing one stops the run. `args` is the run's argparse Namespace,
# which no import has: None is "no record", what Megatron-LM falls back from
# (`state_dict.get('args') or SimpleNamespace()`; with --use-checkpoint-args every setting
# stays the command line's) and Megatron-Bridge reads as none; a made-up Namespace would
# be taken for the run's settings. Without --finetune Megatron-LM compares the record's
# sizes with the command line's (`check_checkpoint_args`) and cannot with None:
# docs/interop.md's recipe passes --finetune.
MCORE_TOP_LEVEL: dict[str, object] = {
    "args": None,
    "checkpoint_version": MCORE_CHECKPOINT_VERSION,
    "iteration": 0,
}
IMPORT_STRATEGY = "import"  # manifest `strategy` of an import: no training run wrote it


class ImportUsageError(ExportUsageError):
    """Cannot be done as asked (exit 2): no model there, output exists, a bad option."""


class ImportFailedError(MfsdpFailedError, ValueError):
    """The model cannot be imported (exit 1): unreadable weights, shapes the config contradicts."""


class NonFiniteImportError(ImportFailedError):
    """A weight holds NaN or Inf, or a --dtype cast overflows it."""


@dataclass
class ImportResult(ConversionResult):
    seconds: float
    checkpoint: str  # the DCP directory written (OUT itself for mcore)
    notes: list[str] = field(default_factory=list)
    # reading, converting and writing the tensors alone; `seconds` is the whole command's,
    # with reading headers and building config.json with transformers (its import: seconds)
    convert_seconds: float | None = None

    def summary(self) -> str:
        return (
            f"imported {self.converted()}, {self.seconds:.1f} s in all, {self.dtype},"
            f" layout {self.layout}, {self.model_type} -> {self.out_dir}"
        )


@dataclass
class ImportPlan:
    source: SafetensorsSource
    layout: str
    model_type: str
    geometry: Geometry
    items: list[ImportItem]
    dtype: DType | None  # None: every tensor keeps its stored dtype
    experts: str | None = None  # an MoE model's mcore expert layout (MCORE_EXPERTS); else None

    def out_dtype(self, item: ImportItem) -> DType:
        stored = self.source.tensors[item.sources[0]].dtype
        return self.dtype if self.dtype is not None and stored.is_floating_point else stored

    def nbytes(self, item: ImportItem) -> int:
        return math.prod(item.shape) * self.out_dtype(item).itemsize

    def state_path(self, item: ImportItem) -> tuple[str, str]:
        """The nested state-dict path the tensor is saved under: ("model", module path)."""
        prefix = MCORE_MODEL_PREFIX if self.layout == MCORE else ""
        return (MODEL_KEY_PREFIX.rstrip("."), prefix + item.target)


def _refuse_bad_request(
    hf_dir: Path, *, layout_name: str, dtype: str, norms: str | None, experts: str | None
) -> tuple[str, str]:
    """The options and the model dir checked without reading it: ImportUsageError (exit 2)
    for a choice that does not exist, Megatron-core names given (`norms`, `experts`: None
    when not) to the hf layout, which writes transformers' names, or a model dir that is
    missing or a file. Cheap, so import-hf runs it before claiming --out, and the long
    reads after. Returns `norms` and `experts` with the defaults and auto resolved
    (`default_experts` of `norms`)."""
    if layout_name not in LAYOUTS:
        raise ImportUsageError(f"--layout {layout_name!r}: choose {', '.join(LAYOUTS)}")
    named = {"--mcore-norms": norms, "--mcore-experts": experts}
    given = [f"{flag} {value}" for flag, value in named.items() if value is not None]
    if layout_name == HF and given:
        raise ImportUsageError(
            f"{' and '.join(given)}: --layout hf writes transformers' names, not Megatron-core's;"
            f" leave {'them' if len(given) > 1 else 'it'} out, or import with --layout mcore"
        )
    norms = DEFAULT_NORMS if norms is None else norms
    experts = "auto" if experts is None else experts
    if norms not in MCORE_NORMS:
        raise ImportUsageError(f"--mcore-norms {norms!r}: choose {', '.join(MCORE_NORMS)}")
    if experts == "auto":
        experts = default_experts(norms)
    if experts not in MCORE_EXPERTS:
        raise ImportUsageError(f"--mcore-experts {experts!r}: choose {', '.join(MCORE_EXPERTS)}")
    if dtype != "auto" and dtype not in DTYPES:
        raise ImportUsageError(f"--dtype {dtype!r}: choose auto, {', '.join(DTYPES)}")
    if hf_dir.exists() and not hf_dir.is_dir():  # model.safetensors or config.json itself
        raise ImportUsageError(_not_a_model_dir(hf_dir))
    if not hf_dir.is_dir():
        raise ImportUsageError(
            f"{hf_dir}: no such directory (give a Hugging Face model dir){hub_id_hint(hf_dir, '')}"
        )
    return norms, experts


def _not_a_model_dir(hf_dir: Path) -> str:
    """The line refusing an HF_DIR that is there but no directory: a file in a model dir
    (model.safetensors, config.json: tab completion's pick) is sent to the dir holding it;
    a FIFO or a device (/dev/zero) is said to be what it is, as validate and export-hf say
    it, not called a file of a model dir."""
    mode = os.stat(hf_dir).st_mode
    if stat.S_ISREG(mode):
        return (
            f"{hf_dir}: a file, not a directory (give the Hugging Face model dir holding it: "
            f"{hf_dir.parent})"
        )
    return f"{hf_dir}: {safe_files.kind_name(mode)}, not a directory"


def plan_model_import(
    hf_dir: Path,
    *,
    layout_name: str = MCORE,
    dtype: str = "auto",
    norms: str | None = None,
    experts: str | None = None,
) -> ImportPlan:
    """Read config and safetensors headers, map names, check shapes; no weight is read but
    a tied config's own `lm_head.weight`, compared with the embedding (`_refuse_untied_head`).
    `norms` and `experts` name the mcore layout's norms and experts (None: not given, so
    DEFAULT_NORMS and auto, the expert layout of the spec `norms` names: `default_experts`);
    the hf layout refuses them."""
    norms, experts = _refuse_bad_request(
        hf_dir, layout_name=layout_name, dtype=dtype, norms=norms, experts=experts
    )
    config, expected, data = _read_config(hf_dir)
    _check_assets(hf_dir)
    try:
        source = SafetensorsSource(hf_dir)
    except SafetensorsError as err:
        raise ImportFailedError(str(err)) from None
    _read_as_causal_lm(source)
    _read_fused_experts_per_expert(source, config.model_type)
    shapes = {name: entry.shape for name, entry in source.tensors.items()}
    problem = weights_disagreement(hf_dir, shapes, expected, unknown=True)
    if problem:
        raise ImportFailedError(problem)
    _refuse_non_floating_weights(source, expected)
    geometry = Geometry.from_config(config)
    if geometry.tie_word_embeddings:
        _refuse_untied_head(source, hf_dir / HF_CONFIG_FILE)
    # after the weights' checks, which take milliseconds: it imports transformers (seconds);
    # before the mcore layout's, which name what its model would compute otherwise
    refuse_unloadable(data, hf_dir / HF_CONFIG_FILE, ImportFailedError)
    try:
        if layout_name == MCORE:
            refuse_attention_window(config)
            refuse_mixed_moe_layers(config)
            refuse_other_computation(config)
        items = plan_import(shapes, layout_name, config.model_type, geometry, norms, experts)
    except UnsupportedModelError as err:
        raise ImportFailedError(f"{hf_dir}: {err}") from None
    except ShapeError as err:
        raise ImportFailedError(f"{hf_dir} {err}") from None
    except MappingError as err:
        raise ImportUsageError(f"{hf_dir}: {err}") from None
    plan = ImportPlan(
        source,
        layout_name,
        config.model_type,
        geometry,
        items,
        None if dtype == "auto" else DTYPES[dtype],
        experts if layout_name == MCORE and config.model_type in MOE_FAMILIES else None,
    )
    _refuse_parts_of_other_dtypes(plan)
    return plan


def _refuse_parts_of_other_dtypes(plan: ImportPlan) -> None:
    """HF tensors merged into one (q, k, v into linear_qkv) stored in different dtypes,
    with no --dtype: the merge failed with a traceback (float8 beside bf16), and the
    merged tensor takes its first part's dtype, which would narrow the others silently.
    With --dtype each part is cast before the merge (`_convert`)."""
    if plan.dtype is not None:
        return
    for item in plan.items:
        stored = [(name, plan.source.tensors[name].dtype.name) for name in item.sources]
        if len({dtype for _name, dtype in stored}) > 1:
            parts = ", ".join(f"{name} ({dtype})" for name, dtype in stored)
            raise ImportFailedError(
                f"{plan.source.root}: {parts} make one tensor but are stored in different"
                f" dtypes; pass --dtype ({', '.join(DTYPES)}) to cast them alike"
            )


CAUSAL_LM_PREFIX = "model."  # base_model_prefix of every family import-hf reads


def _read_as_causal_lm(source: SafetensorsSource) -> None:
    """Read the model's tensors by the names its causal LM loads them under, as
    transformers does: stored rotary buffers left out, and a base model's save (`Qwen2Model`
    writes `embed_tokens.weight`, no `model.` prefix, no head) read under the prefix. Both
    loaded into the same model they were refused as "tensors unknown to" its family."""
    buffers = stored_buffers.ignored_buffers(source.tensors)
    for name in buffers:
        del source.tensors[name]
    if buffers:
        source.notes.append(stored_buffers.left_out_note(buffers))
    names = list(source.tensors)
    if names and not any(n.startswith((CAUSAL_LM_PREFIX, "lm_head.")) for n in names):
        source.tensors = {
            CAUSAL_LM_PREFIX + name: replace(entry, name=CAUSAL_LM_PREFIX + name)
            for name, entry in source.tensors.items()
        }
        source.notes.append(
            f"weights named as a base model saves them (no '{CAUSAL_LM_PREFIX}' prefix, no"
            f" lm_head): read as {CAUSAL_LM_PREFIX}*, as transformers loads them"
        )


def _read_fused_experts_per_expert(source: SafetensorsSource, model_type: str) -> None:
    """An MoE model saved with its experts fused as transformers 5.x holds them in memory
    (`mlp.experts.gate_up_proj` [E, 2I, H], `down_proj` [E, H, I]) is read as the hub's
    per-expert tensors, each a view of the fused tensor's bytes (`hub_expert_entries`):
    planned, checked and written like the per-expert files save_pretrained writes."""
    try:
        source.tensors, split = hub_expert_entries(source.tensors, model_type)
    except ShapeError as err:
        raise ImportFailedError(f"{source.root} {err}") from None
    if split:
        source.notes.append(
            f"{split} fused expert tensor(s) (transformers 5.x's in-memory form) read as"
            " the hub's per-expert tensors"
        )


def _read_config(hf_dir: Path):
    """The model's config, the weights it implies and config.json as read. No config.json,
    or a family import does not read, is the wrong dir (exit 2); one that is there but
    unreadable, not a regular file, linked out of the model dir, not JSON or with impossible
    sizes is a damaged model (exit 1), as a damaged weight file is. One transformers' config
    class refuses (`rms_norm_eps: "1e-6"`) is too, which `plan_model_import` says once the
    weights are checked (the checkpoint would train and export from a model transformers
    cannot load)."""
    config_file = hf_dir / HF_CONFIG_FILE
    if dir_entries.stat_inside(config_file, hf_dir, follow_symlinks=False) is None:
        inside = finding_runs.checkpoint_as_given(hf_dir)
        what = (
            f"; it is (or lies in) the training checkpoint {inside}: import-hf makes"
            f" checkpoints of Hugging Face models; {export_hf_advice(inside)}"
            if inside is not None
            else ""
        )
        adapter = peft_adapter_line(hf_dir)
        if adapter is not None:  # "not a model dir" left the user guessing what the dir is
            raise ImportUsageError(
                f"{adapter}; import-hf makes checkpoints of whole models (config.json and weights)"
            )
        raise ImportUsageError(f"{hf_dir}: no config.json; not a Hugging Face model dir{what}")
    try:
        safe_files.regular_file(
            config_file, safe_files.model_dir_root(hf_dir), f"the model dir {hf_dir}"
        )
        data = read_config_json(config_file)[1]
    except (CheckpointFileError, HFConfigError) as err:
        raise ImportFailedError(str(err)) from None
    model_type = data["model_type"]
    if model_type not in MCORE_IMPORT_FAMILIES:
        code = code_map_words(data)
        raise ImportUsageError(
            f"{config_file}: model family {cut_to(repr(model_type), 80)} is not one import-hf reads"
            f" ({', '.join(sorted(MCORE_IMPORT_FAMILIES))}){f'; {code}' if code else ''}"
        )
    refuse_quantized(data, config_file, ImportUsageError)  # a model import-hf does not read
    try:
        config, expected = load_config(config_file), expected_weights_for(config_file)
    except HFConfigError as err:
        raise ImportFailedError(str(err)) from None
    return config, expected, data


def _check_assets(hf_dir: Path) -> None:
    """The model dir's config and tokenizer files checked as export and training check them
    (`check_local_assets`), before a weight is read: the hf layout copies them into the
    checkpoint, and the mcore one names the dir for export-hf and training to read them
    from, so a tokenizer_config.json giving a key twice (or a FIFO, a link out) would only
    be refused there, after the import had been written."""
    try:
        check_local_assets(hf_dir)
        check_generation_config_beside(hf_dir, None)
    except CheckpointFileError as err:
        raise ImportFailedError(str(err)) from None


def _refuse_non_floating_weights(source: SafetensorsSource, expected) -> None:
    """A weight of the model stored as integers or bools (float bits relabelled I32, a
    quantized file) is refused naming it, as export-hf refuses one: imported, it would
    train as integers or be read as other values."""
    for name in sorted(set(expected.required).intersection(source.tensors)):
        entry = source.tensors[name]
        what = f"it is a floating-point weight of {expected.model_type}"
        try:
            refuse_non_float(name, entry.dtype, what, source.root / entry.file)
        except StoredDtypeError as err:
            raise ImportFailedError(str(err)) from None


def _refuse_untied_head(source: SafetensorsSource, config_file: Path) -> None:
    """A model dir whose config ties the embeddings but whose files hold an `lm_head.weight`
    unequal to the embedding: transformers refuses to tie such a pair and loads it untied,
    while the mcore layout would drop the head and the hf layout keep it under a tied
    config. Which model was meant is not in the files: refused (exit 1), naming the tensor."""
    head, embedding = tied_head.HEAD, tied_head.EMBEDDING
    if head not in source.tensors or embedding not in source.tensors:
        return
    difference = tied_head.safetensors_difference(source, head, embedding)
    if not difference.equal:
        remedy = "transformers loads this model untied: set tie_word_embeddings to false there"
        check = "compare the file with its source (the Hub lists each file's sha256)"
        verdict = tied_head.unequal_verdict(
            difference, embedding, [], str(config_file), remedy, check
        )
        raise ImportFailedError(
            f"{source.root / source.tensors[head].file} [{head}]: {verdict.what}"
        )


def _convert(plan: ImportPlan, item: ImportItem, on_window: CastProgress | None = None):
    """Read the item's source tensors, each cast a window at a time (`read_cast`), and merge
    them: the tensor to write (torch path). Each part is cast first: parts of several dtypes
    merge."""
    out = plan.out_dtype(item).torch
    sources = [read_cast(plan.source, name, out, on_window) for name in item.sources]
    tensor = item.merge.apply(sources, plan.geometry)
    del sources
    return tensor


def _keeps_bytes(plan: ImportPlan, item: ImportItem) -> bool:
    """Its bytes stay as stored (no cast), so they can move file to file."""
    return all(plan.source.tensors[name].dtype == plan.out_dtype(item) for name in item.sources)


def _payload_ranges(plan: ImportPlan, item: ImportItem) -> list[SourceRange]:
    """Where the item's bytes are in the safetensors files, in the order they are written:
    one range for most tensors, 3 per query group for a QKV fusion."""
    entries = [plan.source.tensors[name] for name in item.sources]
    ranges = item.merge.ranges([entry.nbytes for entry in entries], plan.geometry)
    return [
        SourceRange(plan.source.root / entries[index].file, entries[index].offset + at, length)
        for index, at, length in ranges
    ]


def _aliases(plan: ImportPlan) -> list[tuple[ImportItem, ImportItem]]:
    """(item, earlier item) pairs whose bytes are equal because they are made the same way
    (same sources, merge, shape and dtype): a tied `lm_head.weight` written from the
    embedding. The later one is stored as an alias of the earlier (`add_alias`): its bytes
    once on disk, both keys in `.metadata`."""
    made_by: dict[tuple, ImportItem] = {}
    pairs = []
    for item in plan.items:
        recipe = (item.sources, item.merge.name, item.shape, plan.out_dtype(item).name)
        if recipe in made_by:
            pairs.append((item, made_by[recipe]))
        else:
            made_by[recipe] = item
    return pairs


def _refuse_nonfinite_sources(plan: ImportPlan, item: ImportItem) -> None:
    """NaN/Inf in a weight (a diverged run's save) stops the import, as it stops export-hf
    and fails `validate --deep`: a checkpoint made from it would train on garbage."""
    for name in item.sources:
        entry = plan.source.tensors[name]
        found = plan.source.count_nonfinite(entry)
        if found:
            raise NonFiniteImportError(
                f"{plan.source.root / entry.file} [{name}]: holds {found} NaN/Inf value(s)"
                " (a diverged run?); --allow-nonfinite imports it anyway"
            )


def _refuse_nonfinite_cast(plan: ImportPlan, item: ImportItem, tensor) -> None:
    """After a --dtype cast: NaN/Inf the sources held, or values the cast overflowed."""
    found = count_nonfinite_tensor(tensor)
    if not found:
        return
    _refuse_nonfinite_sources(plan, item)  # names the source when it held them already
    raise NonFiniteImportError(
        f"{plan.source.root} [{', '.join(item.sources)}]: overflows"
        f" {plan.out_dtype(item).name} ({found} value(s) become Inf); --allow-nonfinite"
        " imports it anyway"
    )


def _add_item(
    plan: ImportPlan,
    item: ImportItem,
    writer: StreamingDcpWriter,
    allow_nonfinite: bool,
    report: Callable[[int, int], None],
) -> None:
    """Add one planned tensor to `writer`: its bytes file to file when they stay as stored,
    else cast a window at a time, `report`ing the bytes cast with those written (a bar in
    bytes moves within a tensor of many GiB). A function of its own so the cast tensor is
    freed as it returns: held by the loop, it stayed alive while the next was read and cast
    (two cast tensors and a source at once)."""
    path, dtype = plan.state_path(item), plan.out_dtype(item)
    try:
        if not _keeps_bytes(plan, item):
            raise BlobTooLargeError("a cast needs the tensor")
        if not allow_nonfinite:
            _refuse_nonfinite_sources(plan, item)
        writer.add_raw(path, dtype, item.shape, _payload_ranges(plan, item))
        return
    except BlobTooLargeError:
        pass
    cast = 0

    def on_window(nbytes: int) -> None:
        nonlocal cast
        cast += nbytes
        tensors, written = writer.written()
        report(tensors, written + cast)

    tensor = _convert(plan, item, on_window)
    if not allow_nonfinite:
        _refuse_nonfinite_cast(plan, item, tensor)
    _add_cast(writer, path, dtype, tensor)


def _add_cast(
    writer: StreamingDcpWriter, path: tuple[str, ...], dtype: DType, tensor: torch.Tensor
) -> None:
    """Add a cast tensor, its bytes written before this returns. The data file's thread keeps
    the job it ran last until its next one comes, and with it the view of the tensor's
    bytes it was given: that view is released here once written, else the tensor stayed
    alive while the next one was cast. One of 4 GiB or more, which `torch.save` writes
    (`add_tensor`), is refused by `add_raw` before any job holds it."""
    import torch

    data = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().data
    with data:
        try:
            writer.add_raw(path, dtype, tuple(tensor.shape), data)
            return
        except BlobTooLargeError:
            pass
    writer.add_tensor(path, tensor)


def _write_model(
    plan: ImportPlan,
    dist_ckpt: Path,
    progress: Progress | None,
    hash_data: bool = False,
    allow_nonfinite: bool = False,
) -> tuple[int, dict[str, FileRecord | None]]:
    """Write every planned tensor (an alias writes no bytes); returns the payload bytes
    written and each data file's record. A weight holding NaN/Inf is refused unless
    `allow_nonfinite`."""
    writer = StreamingDcpWriter(dist_ckpt, hash_data=hash_data)
    aliases = _aliases(plan)
    aliased = {item.target for item, _ in aliases}
    stored = [item for item in plan.items if item.target not in aliased]
    total = sum(plan.nbytes(item) for item in stored)

    def report(tensors: int, nbytes: int) -> None:  # the files' threads write behind the plan
        if progress is not None:
            progress(tensors, len(stored), nbytes, total)

    # Largest first: each goes to the data file with the fewest bytes so far, so the files'
    # threads end within one small tensor of each other (a large one last would run alone).
    largest_first = sorted(stored, key=plan.nbytes, reverse=True)
    try:
        for item in largest_first:
            _add_item(plan, item, writer, allow_nonfinite, report)
            # each tensor is read here (its NaN/Inf check) or cast: a minute for 60k experts
            report(*writer.written())
        for item, same_as in aliases:
            writer.add_alias(plan.state_path(item), plan.state_path(same_as))
        if plan.layout == MCORE:
            for key, value in MCORE_TOP_LEVEL.items():
                writer.add_object((key,), value)
        records = writer.finish(report)
    except BaseException:
        writer.abort()
        raise
    return total, records


def import_hf(
    hf_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    layout_name: str = MCORE,
    dtype: str = "auto",
    norms: str | None = None,
    experts: str | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
    allow_nonfinite: bool = False,
) -> ImportResult:
    """Convert the safetensors model in `hf_dir` into a DCP checkpoint at `out_dir`.

    Raises ImportUsageError (bad usage: exit 2), ImportFailedError (unreadable or inconsistent
    model, a weight holding NaN/Inf unless `allow_nonfinite`: exit 1), OSError (disk full,
    unwritable). On any failure nothing is left at OUT.
    """
    started = time.monotonic()
    source_dir, out = Path(hf_dir), Path(out_dir)
    _refuse_bad_request(
        source_dir, layout_name=layout_name, dtype=dtype, norms=norms, experts=experts
    )
    replaceable = functools.partial(earlier_import_problem, layout_name=layout_name)
    _check_out(out, source_dir, replaceable)
    if source_dir.resolve() in out.resolve().parents:
        raise ImportUsageError(
            f"{out}: lies in the model dir being imported; choose an --out outside it"
        )
    # Claimed before the source is read (headers, a tied head's bytes: minutes for a large
    # model): --overwrite replaces the directory found here, and a concurrent export into
    # the same --out meanwhile is refused instead of being replaced when this one publishes.
    asset_notes: list[str] = []  # the hf layout's, on the model dir's files it copied
    with claim_output(out, overwrite, replaceable=replaceable) as claim:
        plan = plan_model_import(
            source_dir, layout_name=layout_name, dtype=dtype, norms=norms, experts=experts
        )
        converting = time.monotonic()
        if plan.layout == MCORE:
            written, _ = _write_model(plan, claim.tmp, progress, allow_nonfinite=allow_nonfinite)
            checkpoint = out
        else:
            written, asset_notes = _write_run_dir(
                plan, source_dir, claim.tmp, started, progress, allow_nonfinite
            )
            checkpoint = layout.step_dir(out, 0) / layout.DIST_CKPT_DIR
        convert_seconds = time.monotonic() - converting
        claim.publish()
    notes = list(plan.source.notes) + asset_notes
    if plan.layout == MCORE:
        notes.append(_config_stays_note(source_dir))
    if plan.experts is not None:
        notes.append(_EXPERT_NOTES[plan.experts])
    notes += [
        f"{item.target} shares the bytes of {same_as.target} (tied: stored once)"
        for item, same_as in _aliases(plan)
    ]
    mixed = _mixed_dtypes_note(plan)
    if mixed is not None:
        notes.append(mixed)
    dtypes = sorted({plan.out_dtype(item).name for item in plan.items})
    return ImportResult(
        str(out),
        plan.layout,
        plan.model_type,
        "+".join(dtypes),
        len(plan.items),
        written,
        time.monotonic() - started,
        str(checkpoint),
        notes,
        convert_seconds,
    )


def _mixed_dtypes_note(plan: ImportPlan) -> str | None:
    """What export-hf makes of floating weights kept in more than one stored dtype (bf16
    matrices beside fp32 norms), or None: it writes one dtype for every tensor, so only
    --dtype fp32 gives each value back (per-tensor dtypes are not recorded)."""
    if plan.dtype is not None:
        return None
    kept: dict[str, list[str]] = {}
    for item in plan.items:
        dtype = plan.out_dtype(item)
        if dtype.is_floating_point:
            kept.setdefault(dtype.name, []).append(item.target)
    if len(kept) < 2:
        return None
    least = min(kept, key=lambda name: len(kept[name]))
    counts = ", ".join(f"{name} {len(targets)}" for name, targets in sorted(kept.items()))
    return (
        f"weights kept in their stored dtypes ({counts}; {least}: {first_of(kept[least], 2)}):"
        " export-hf writes every tensor in one dtype, --dtype auto config.json's (else the"
        " most common stored), rounding the others; --dtype fp32 keeps every value"
    )


# What a Megatron-LM run must build to load the experts as written (--mcore-experts)
_EXPERT_NOTES = {
    "grouped": "experts written as TEGroupedMLP's (mlp.experts.linear_fc1.weight<E>_w): load"
    " with the Transformer Engine spec and --moe-grouped-gemm (--mcore-experts sequential"
    " for SequentialMLP)",
    "sequential": "experts written as SequentialMLP's (mlp.experts.local_experts.<E>.): load"
    " without --moe-grouped-gemm (--mcore-experts grouped for TEGroupedMLP)",
}


def _config_stays_note(hf_dir: Path) -> str:
    """The mcore layout's note on where the config and tokenizer stay (the model dir) and
    how the next command reads them. mfsdp train refuses a config.json or
    tokenizer_config.json with an auto_map (`trainer.model_code`), which export-hf writes
    without (`asset_rewrites`): for such a dir, training is sent to the hf layout, whose
    copies leave it out, instead of to a model.hf_config it would refuse."""
    stays = f"config and tokenizer stay in {hf_dir}: pass --hf-config {hf_dir} to export-hf"
    root = safe_files.model_dir_root(hf_dir)
    coded = [
        hf_dir / name
        for name in CODE_NAMING_FILES
        if os.path.lexists(hf_dir / name)  # checked as an asset already (`_check_assets`)
        and code_map(safe_files.read_bytes(hf_dir / name, MAX_JSON_ASSET_BYTES, root=root))
    ]
    if not coded:
        return f"{stays}, model.hf_config={hf_dir} to mfsdp train"
    return (
        f"{stays} (which writes {coded[0].name} without its {CODE_KEY}); mfsdp train refuses"
        f" {coded[0]}'s {CODE_KEY} (code shipped with the model, which it never runs): to"
        f" train from this model, import it with --layout hf, whose copy leaves it out"
    )


# what import-hf's --overwrite replaces (its --help), said where an --out is refused
IMPORT_REPLACES = "an empty directory or an earlier import-hf output of the same --layout"


def _check_out(out: Path, source_dir: Path, replaceable: Replaceable) -> None:
    """Refuse, before any work, an --out import may not write: what `check_out_dir` refuses
    (the model dir read, a dir inside a checkpoint), and a directory that
    `import-hf --overwrite` would not replace, named now rather than after "pass
    --overwrite"; one that is itself a checkpoint is named by what it holds (`replaceable`'s
    words: check_out_dir's speak of an earlier export). An earlier import is a checkpoint
    too, which check_out_dir refuses as an --out: for it, the folder it lies in must be
    none."""
    try:
        found = out.is_dir() and any(os.scandir(out))
    except OSError:
        found = True  # one that cannot be listed: `replaceable` says so
    problem = replaceable(out) if found else None
    if found and problem is None:
        require_writable_dir("--out", out, beside=True, error=ImportUsageError)
        inside = inside_checkpoint(out.parent)
        if inside is not None:
            raise ImportUsageError(
                f"{out}: the folder it is in {inside}; choose an --out outside it"
            )
        return
    absolute = Path(os.path.abspath(out))
    if problem is not None and finding_runs.checkpoint_containing(absolute) == absolute:
        raise unreplaceable(out, problem)
    check_out_dir(out, [], [source_dir.resolve()], IMPORT_REPLACES)
    if problem is not None:
        raise unreplaceable(out, problem)


# The files of an mcore import: the DCP metadata and its data files (`StreamingDcpWriter`)
_DCP_FILE = re.compile(r"__\d+_\d+\.distcp")


def earlier_import_problem(out: Path, layout_name: str) -> str | None:
    """Why `import-hf --layout LAYOUT_NAME --overwrite` may not replace the directory `out`
    (the words go before "; --overwrite replaces only those"), or None when it may: it is
    empty, or an earlier import of that layout, as import writes it and nothing else.
    Anything else is someone's data: a Hugging Face model dir (a download, given as --out by
    a slip of tab completion: it looks like an earlier *export*, the one kind of directory
    this flag replaced), a checkpoint, any other files."""
    try:
        entries = sorted(entry.name for entry in os.scandir(out))
    except OSError as err:
        return f"cannot be listed ({err.strerror})"
    if not entries:
        return None
    earlier = _earlier_import_layout(out, entries)
    if earlier == layout_name:
        return None
    if earlier is not None:
        held = f"an earlier import of --layout {earlier}"
    elif HF_CONFIG_FILE in entries and any(name.endswith(".safetensors") for name in entries):
        held = f"a Hugging Face model ({HF_CONFIG_FILE} and safetensors)"
    else:
        marks = [name for name in entries if name in _CHECKPOINT_NAMES or _is_step_name(name)]
        marks.sort(key=lambda name: name in _IMPORT_WRITES)  # what was added, named first
        held = f"a checkpoint ({marks[0]})" if marks else f"other files ({first_of(entries, 3)})"
    return f"holds {held}: neither empty nor an earlier import-hf --layout {layout_name}"


_CHECKPOINT_NAMES = (
    layout.DCP_METADATA_FILE,
    layout.DIST_CKPT_DIR,
    layout.MANIFEST_FILE,
    layout.TRACKER_FILE,
)


# What an import itself writes at the top of its --out: in an import a step was then added
# to (a run trained from it, Megatron-LM's iter_N), the step added is why it is refused
_IMPORT_WRITES = {layout.DCP_METADATA_FILE, layout.TRACKER_FILE, f"{layout.STEP_DIR_PREFIX}0"}


def _is_step_name(name: str) -> bool:
    return name.startswith(layout.STEP_DIR_PREFIX) or layout.is_megatron_step_name(name)


def _earlier_import_layout(out: Path, entries: list[str]) -> str | None:
    """The layout of the import `out` holds (entries: its names, sorted), or None when it
    is not one: an mcore DCP dir whose Megatron `args` is None (no training run writes
    that), or a run dir of step 0 alone whose manifest says an import wrote it and lists
    every file in it."""
    if layout.DCP_METADATA_FILE in entries:
        rest = [name for name in entries if name != layout.DCP_METADATA_FILE]
        return (
            MCORE if all(_DCP_FILE.fullmatch(name) for name in rest) and _args_none(out) else None
        )
    step = layout.step_dir(out, 0)
    if entries != sorted([layout.TRACKER_FILE, step.name]):
        return None
    try:
        manifest = read_manifest(step / layout.MANIFEST_FILE)
        files = {
            str(path.relative_to(step))
            for path in step.rglob("*")
            if not path.is_dir() or path.is_symlink()
        }
    except (MfsdpError, OSError):
        return None
    if manifest.strategy != IMPORT_STRATEGY or files - {layout.MANIFEST_FILE} - set(manifest.files):
        return None
    return HF


def _args_none(dcp_dir: Path) -> bool:
    """Whether the DCP dir holds Megatron's top-level entries as an mcore import writes
    them: `args` None among exactly MCORE_TOP_LEVEL's."""
    try:
        reader = CheckpointReader(dcp_dir)
        return set(reader.objects) == set(MCORE_TOP_LEVEL) and read_args(reader) is None
    except (MfsdpError, OSError, ValueError):
        return False


def _write_run_dir(
    plan: ImportPlan,
    hf_dir: Path,
    run: Path,
    started: float,
    progress: Progress | None,
    allow_nonfinite: bool,
) -> tuple[int, list[str]]:
    """Our layout: step 0 with dist_ckpt, huggingface/ (config, tokenizer), manifest, tracker.
    Returns the bytes written and the note on the model dir's files left out."""
    step = layout.step_dir(run, 0)
    written, records = _write_model(
        plan, step / layout.DIST_CKPT_DIR, progress, True, allow_nonfinite
    )
    assets = step / layout.HF_ASSETS_DIR
    assets.mkdir()
    copied = asset_files(str(hf_dir), "local")
    for name, load in copied.items():
        target = assets / name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(target, load())
        if name == HF_CONFIG_FILE and plan.dtype is not None:
            # the dtype the weights were cast to, as export writes it: what a plain export
            # of this run dir writes again, and what its weights are
            set_config_dtype(target, plan.dtype)
        step_saving.fsync_path(target)
    asset_names = [str(p.relative_to(step)) for p in sorted(assets.rglob("*")) if p.is_file()]
    files = hash_files(step, asset_names)
    files.update(  # hash_data=True: every record is set
        {f"{layout.DIST_CKPT_DIR}/{name}": rec for name, rec in records.items() if rec is not None}
    )
    manifest = Manifest(
        step=0,
        world_size=1,
        strategy=IMPORT_STRATEGY,
        contents=["model"],
        files=dict(sorted(files.items())),
        model_family=plan.model_type,
        versions=_package_versions(),
        created_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        save_seconds=round(time.monotonic() - started, 3),
        info={"imported_from": str(hf_dir.resolve())},
    )
    write_bytes(step / layout.MANIFEST_FILE, manifest.to_json().encode(), durable=True)
    step_saving.fsync_path(step)
    step_saving.write_tracker(run, 0)
    return written, copied.left_out_note(str(hf_dir))


def _package_versions() -> dict[str, str]:
    """What the manifest records of the software, read from package metadata: importing
    torch only to ask its version would cost more than a small import."""
    from importlib.metadata import PackageNotFoundError, version

    from mfsdp_ckpt import __version__

    found = {"mfsdp": __version__}
    for package in ("torch", "transformers", "safetensors"):
        with contextlib.suppress(PackageNotFoundError):
            found[package] = version(package)
    return found


__all__ = [
    "ImportFailedError",
    "ImportPlan",
    "ImportResult",
    "ImportUsageError",
    "NonFiniteImportError",
    "import_hf",
    "plan_model_import",
]
