"""Writing a planned export into its work dir: assets, the plan, then every tensor.

The plan is made against the config.json written into the work dir (its vocab may be
fitted to the checkpoint's), so planning and writing are one step here; the driver
(`export_hf`) only claims the output, verifies and publishes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.model_record_crcs import RecordedCrcs
from mfsdp_ckpt.check.tensor_crc import CrcCheckedReader
from mfsdp_ckpt.convert.export_errors import ExportError, ExportUsageError
from mfsdp_ckpt.convert.export_options import ExportOptions
from mfsdp_ckpt.convert.export_plan import ExportPlan, convert, plan_export, task_cost
from mfsdp_ckpt.convert.export_prepare import PreparedSource
from mfsdp_ckpt.convert.export_scheduler import StopFlag, run_tasks
from mfsdp_ckpt.convert.export_source import (
    ExportSource,
    JsonConfig,
    load_copied_config,
    refuse_family_without_table,
)
from mfsdp_ckpt.convert.export_stream import (
    PieceBuffers,
    nonfinite_error,
    stream_tensor,
    streams_in_pieces,
)
from mfsdp_ckpt.convert.hf_config import layers_beyond_checkpoint, read_config_json
from mfsdp_ckpt.convert.megatron_lora_alpha import set_lora_scale
from mfsdp_ckpt.convert.name_maps import MappedTensor
from mfsdp_ckpt.convert.recorded_vocab import fit_config_file
from mfsdp_ckpt.convert.write_tally import report_writes
from mfsdp_ckpt.format import step_saving
from mfsdp_ckpt.format.dtypes import DType
from mfsdp_ckpt.format.finite import count_nonfinite_tensor
from mfsdp_ckpt.format.manifest import read_manifest
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.storage.named_writes import write_bytes, write_text
from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter
from mfsdp_ckpt.storage.tensor_memory import tensor_memory

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def _refuse_layers_beyond(
    prepared: PreparedSource, config: JsonConfig | PretrainedConfig, options: ExportOptions
) -> None:
    """A config naming more layers than the checkpoint holds weights for is another model's
    config: refused as that one fact, by the documented rule for a contradiction (exit 2
    for --hf-config's, exit 1 for the checkpoint's own), however many layers it adds.
    hf_config.MAX_LAYERS stays the one limit of the tool's (check_geometry says it)."""
    names = prepared.source.reader.tensors
    found = layers_beyond_checkpoint(getattr(config, "num_hidden_layers", None), names)
    if found is None:
        return
    where = prepared.config_json
    if options.hf_config is not None:
        raise ExportUsageError(
            f"--hf-config {where}: {found}; pass the config of the model this checkpoint holds"
        )
    raise ExportError(f"{where}: {found}")


def _check_backed(plan: ExportPlan) -> None:
    """Every chunk the plan reads lies inside its file and can hold its elements (or, stored
    compressed, can be decoded here), so the sizes the output is checked to have room for
    are backed by bytes (metadata claiming 1 TiB over a 1 KB blob is refused before the
    free-space check says the disk is too small for it)."""
    reader = plan.source.reader
    adapters = plan.lora.adapter_keys if plan.lora is not None else []
    for entry in [plan.entry(item) for item in plan.items] + [reader.tensors[k] for k in adapters]:
        for chunk in entry.chunks:
            if chunk.numel:
                reader._check_stored(entry, chunk)


def write_assets(assets: dict[str, Callable[[], bytes]], target: Path) -> None:
    for name, load in assets.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, load())


def set_config_dtype(config_file: Path, dtype: DType) -> None:
    """The exported config names the dtype actually written, as save_pretrained does."""
    data = read_config_json(config_file)[1]  # bounded, as every read of a config.json
    data["dtype"] = dtype.name
    if "torch_dtype" in data:
        data["torch_dtype"] = dtype.name
    write_text(config_file, json.dumps(data, indent=2, sort_keys=True) + "\n")


@dataclass
class WrittenExport:
    """An export's tensors, written and closed in the work dir, with what its result and
    notes are made of."""

    plan: ExportPlan
    writer: ShardedSafetensorsWriter
    vocab_notes: list[str]
    convert_seconds: float


def write_planned(prepared: PreparedSource, tmp: Path, options: ExportOptions) -> WrittenExport:
    """Write the assets, plan the tensors against the config.json now in `tmp` and write
    them. The config is read from `tmp` because `fit_config_file` may have fitted its vocab
    to the checkpoint's; the written config names the dtype the plan chose. A failure
    closes the writer's files (the claim removes `tmp`)."""
    write_assets(prepared.assets, tmp)
    vocab_notes = fit_config_file(
        prepared.source.paths, prepared.source.reader, tmp, prepared.asset_location
    )
    plan = _plan(prepared, tmp, options)
    writer = ShardedSafetensorsWriter(tmp, plan.specs(), options.shard_size)
    try:
        writer.open()
        converting = time.monotonic()
        _write_tensors(plan, writer, options)
        writer.close()
        convert_seconds = time.monotonic() - converting
    except BaseException:
        writer.abort()
        raise
    set_config_dtype(tmp / HF_CONFIG_FILE, plan.dtype)
    for name in prepared.assets:
        step_saving.fsync_path(tmp / name)
    return WrittenExport(plan, writer, vocab_notes, convert_seconds)


def reading_checked(source: ExportSource) -> ExportSource:
    """`source` read through a `CrcCheckedReader` for an export's own reads: a tensor
    converted whole (a fused QKV or gate/up split, stacked experts, a LoRA adapter or
    merge) has each raw record read once into memory and checked against the CRC
    torch.save wrote for it as it lands, as a streamed one is (`export_stream`); a blob
    torch decodes is checked from the bytes torch reads of it, in the same read
    (`decoded_record_crc`); what the decoding does not read of a blob is not read again
    for it (--verify does). Where the step's manifest records each model record's CRC,
    a record holding another is refused (`model_record_crcs`): a data file of another step."""
    recorded = _recorded_crcs(source)
    checked = CrcCheckedReader.over(source.reader, decoded_too=False, recorded=recorded)
    return replace(source, reader=checked)


def _recorded_crcs(source: ExportSource) -> RecordedCrcs | None:
    """The manifest's CRC of each model record, None where it records none (written
    before manifests did, or no manifest: read as before)."""
    if source.paths is None or source.paths.manifest is None:
        return None
    records = read_manifest(source.paths.manifest).model_records
    return None if records is None else RecordedCrcs(records)


def _plan(prepared: PreparedSource, tmp: Path, options: ExportOptions) -> ExportPlan:
    """The export's plan, with a merged LoRA's scale set (its alpha recorded or given, never
    guessed), checked to be backed by the checkpoint's bytes before the writer checks there
    is room for them. --lora-alpha with no adapter to merge is refused (exit 2). Its
    tensors are read `reading_checked`."""
    source = reading_checked(prepared.source)
    refuse_family_without_table(
        source, tmp / HF_CONFIG_FILE, options.layout_name, options.hf_config
    )
    config = load_copied_config(
        tmp / HF_CONFIG_FILE, prepared.asset_location, prepared.derived is not None
    )
    _refuse_layers_beyond(prepared, config, options)
    plan = plan_export(
        source,
        config,
        layout_name=options.layout_name,
        dtype=options.dtype,
        drop_mtp=options.drop_mtp,
        hf_config=options.hf_config,
    )
    plan.allow_nonfinite = options.allow_nonfinite
    if plan.lora is None and options.lora_alpha is not None:
        raise ExportUsageError(
            f"--lora-alpha: {source.location} holds no LoRA adapter to merge; leave"
            " --lora-alpha out"
        )
    if plan.lora is not None:
        set_lora_scale(plan.lora, source.location, prepared.local_paths, options.lora_alpha)
    _check_backed(plan)
    return plan


def _write_tensors(
    plan: ExportPlan, writer: ShardedSafetensorsWriter, options: ExportOptions
) -> None:
    """Every planned tensor into the open `writer`, on `options.threads` threads: one that
    keeps its name layout streams file to file, or from a URL's store, through per-thread
    buffers (costing the byte budget nothing); any other is converted whole under the
    budget, refused if it holds NaN/Inf unless allowed."""
    streamable = {item.source for item in plan.items if streams_in_pieces(plan, item)}
    buffers = PieceBuffers()
    stop = StopFlag()  # checked as each window lands (`report_writes`) and between NaN scans

    def work(item: MappedTensor) -> None:
        if item.source in streamable and stream_tensor(plan, item, writer, buffers, stop):
            return
        where = f"{plan.source.location} [{item.source}]"
        with tensor_memory(where, plan.entry(item).nbytes, "converting it"):
            for name, tensor in convert(plan, item):
                nonfinite = 0 if plan.allow_nonfinite else count_nonfinite_tensor(tensor)
                if nonfinite:
                    raise nonfinite_error(plan, item, nonfinite, overflow=None)
                writer.write(name, tensor)

    def cost(plan: ExportPlan, item: MappedTensor) -> int:
        return 0 if item.source in streamable else task_cost(plan, item)

    threads, budget = options.threads, options.buffer_bytes
    on_done = report_writes(writer, options.progress, len(plan.items), stop)
    run_tasks(plan, work, threads, budget, on_done, cost, stop)
