"""What a checkpoint's own record says about how its stored tensors are laid out.

Two layouts depend on settings no tensor shows, only the run's record:

* Megatron's vocabulary padding (`vocab_padding.RecordedPadding`): Megatron-LM's args
  (unless pad_vocab_size is false) state the rows it built as padded_vocab_size, and
  without it its rule holds: vocab_size rounded up to a multiple of
  make_vocab_size_divisible_by times the tensor-parallel size. A record with
  should_pad_vocab is a Megatron-Bridge provider's (its run_config.yaml, or verl's
  transformer_config.json of a model Bridge built), which pads by that rule only when it
  is true and else holds vocab_size rows exactly. verl's transformer_config.json without
  it (Megatron-core's TransformerConfig, which knows no vocabulary) and a Bridge record
  without it state no padding: the guess decides. `args` holding None is an import's
  (`import-hf --layout mcore`), whose rows are its model's: no padding at all.
* the gate and up rows of a fused SwiGLU linear_fc1 (`fused_tensors.GateUpOrder`): each
  tensor-parallel rank holds [gate_r; up_r]. Megatron-FSDP keeps a parameter as one DTensor
  over the ranks' pieces in rank order, so an fsdp_dtensor save that left fc1 fused holds
  [gate_0; up_0; gate_1; up_1; ...] (its SwiGLU split, handle_swiglu_in_state_dict, takes
  each rank's halves apart for the same reason); with one rank that is [gate; up]. torch_dcp
  runs with tensor_model_parallel_size 1 only (Megatron-LM's arguments.py asserts it), and
  torch_dist, which gathers [gate; up] whole, is not read here. So a record of more than
  one rank proves the per-rank order only beside ckpt_format fsdp_dtensor; any other record
  of it (verl's transformer_config.json names no format) leaves the order unknown, and such
  a tensor is refused, naming the setting, rather than split by a guess. A record of one
  rank, or none (Megatron's default is 1), is [gate; up]. Routed experts are split over
  expert_tensor_parallel_size, which Megatron-LM sets to tensor_model_parallel_size when
  it is not given.

The record is Megatron-Bridge's run_config.yaml, else verl's transformer_config.json (beside
`model/` or `dist_ckpt/`), else Megatron-LM's `args` in the DCP (the only one a URL is read
for). One that cannot be read leaves the padding to `vocab_padding`'s guess and the fc1
order unknown; its error is reported where the record is read for the config.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.convert.fused_tensors import GateUpOrder, Geometry
from mfsdp_ckpt.convert.megatron_record import (
    ARGS_KEY,
    bridge_model_fields,
    read_args,
    run_config_data,
)
from mfsdp_ckpt.convert.verl_record import read_transformer_config
from mfsdp_ckpt.convert.vocab_padding import RecordedPadding
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.storage.byte_store import CheckpointFileError

if TYPE_CHECKING:
    from mfsdp_ckpt.storage.reader import CheckpointReader

TP_KEY = "tensor_model_parallel_size"
EXPERT_TP_KEY = "expert_tensor_parallel_size"
PADDED_KEY = "padded_vocab_size"  # Megatron-LM's: the rows it built (its tokenizer's, padded)
DIVISOR_KEY = "make_vocab_size_divisible_by"
BRIDGE_PADS_KEY = "should_pad_vocab"  # Megatron-Bridge's provider: pad by the rule or not at all
SPLITS_PER_RANK = "fsdp_dtensor"  # the format whose fused fc1 is per-rank pieces in order
# Megatron-LM's default format, which mfsdp reads only converted: its `args` stay in the save
CONVERTED_FROM = "torch_dist"
MAX_RANKS = 1 << 16
MAX_PADDED_ROWS = 1 << 40  # any vocabulary; a stored row count is compared with it


@dataclass(frozen=True)
class Record:
    """The settings a checkpoint records of its run (Megatron-LM's names), where
    (`where`: the file or DCP entry, for an error line), and the checkpoint format it
    names (None: none named)."""

    fields: dict[str, Any]
    where: str
    ckpt_format: str | None
    megatron_lm: bool = False  # Megatron-LM's args: its padding rule holds without a flag
    imported: bool = False  # `args` None: an import's weights, no run's record


def read_record(paths: layout.CheckpointPaths | None, reader: CheckpointReader) -> Record | None:
    """The checkpoint's record (module docstring), one of no settings for an import's
    `args` None; None when it keeps none. Raises
    CheckpointFormatError / CheckpointFileError for one that cannot be read."""
    if paths is not None and paths.run_config is not None:
        data = run_config_data(paths.run_config, paths.root)
        where = f"{paths.run_config} model"
        model = data.get("model")
        fields = bridge_model_fields(model, where)[0] if isinstance(model, dict) else {}
        checkpoint = data.get("checkpoint")
        found = checkpoint.get("ckpt_format") if isinstance(checkpoint, dict) else None
        return Record(dict(fields), where, found if isinstance(found, str) else None)
    if paths is not None:
        verl = _verl_transformer_config(paths)
        if verl is not None:
            return verl
    if ARGS_KEY in reader.objects:
        args = read_args(reader)
        where = f"{reader.root} [{ARGS_KEY}]"
        if args is None:
            return Record({}, where, None, imported=True)
        found = args.get("ckpt_format")
        return Record(args, where, found if isinstance(found, str) else None, megatron_lm=True)
    return None


def _verl_transformer_config(paths: layout.CheckpointPaths) -> Record | None:
    """verl's transformer_config.json (`verl_record`), as a record of settings."""
    verl = read_transformer_config(paths)
    return None if verl is None else Record(verl.fields, str(verl.file), None)


def with_recorded_layout(
    geometry: Geometry, paths: layout.CheckpointPaths | None, reader: CheckpointReader
) -> Geometry:
    """`geometry` with the vocabulary padding and fused fc1 order the checkpoint's record
    proves (module docstring)."""
    try:
        record = read_record(paths, reader)
    except (CheckpointFormatError, CheckpointFileError) as err:
        unknown = GateUpOrder(
            unknown=f"a fused linear_fc1 (gate and up in one tensor), whose order over"
            f" tensor-parallel ranks the checkpoint's record tells, which could not be read"
            f" ({err})"
        )
        return replace(geometry, gate_up=unknown, expert_gate_up=unknown)
    if record is None:
        return geometry
    expert_key = EXPERT_TP_KEY if record.fields.get(EXPERT_TP_KEY) is not None else TP_KEY
    return replace(
        geometry,
        vocab_padding=_padding(record),
        gate_up=_gate_up_order(record, TP_KEY),
        expert_gate_up=_gate_up_order(record, expert_key),
    )


def recorded_padding(
    paths: layout.CheckpointPaths | None, reader: CheckpointReader
) -> RecordedPadding | None:
    """The vocabulary padding the checkpoint's record states (`_padding`); None when it
    states none or cannot be read (reported where the record is read for the config)."""
    try:
        record = read_record(paths, reader)
    except (CheckpointFormatError, CheckpointFileError):
        return None
    return None if record is None else _padding(record)


def _count(value: Any, most: int = MAX_RANKS) -> int | None:
    """`value` when it is a plain integer from 1 to `most`, else None."""
    plain = isinstance(value, int) and not isinstance(value, bool)
    return value if plain and 0 < value <= most else None


def _padding(record: Record) -> RecordedPadding | None:
    """The vocabulary padding the record states (module docstring), None where it states
    none."""
    fields = record.fields
    if record.imported:
        where = f"an import holds its model's rows, unpadded ({record.where} holds None)"
        return RecordedPadding(1, where, imported=True)
    if BRIDGE_PADS_KEY in fields:
        pads = fields[BRIDGE_PADS_KEY]
        if pads is False:
            return RecordedPadding(1, f"{BRIDGE_PADS_KEY}=False in {record.where}")
        return _rule(record) if pads is True else None
    if not record.megatron_lm or fields.get("pad_vocab_size", True) is not True:
        return None  # Megatron-LM with pad_vocab_size false took its size from elsewhere
    padded = _count(fields.get(PADDED_KEY), MAX_PADDED_ROWS)
    if padded is not None:
        return RecordedPadding(None, f"{PADDED_KEY}={padded} in {record.where}", padded)
    return _rule(record)


def _rule(record: Record) -> RecordedPadding | None:
    """Megatron's `vocab_size_with_padding` by the record's make_vocab_size_divisible_by
    and tensor-parallel size; None where it lacks either."""
    fields = record.fields
    divisor, ranks = _count(fields.get(DIVISOR_KEY)), _count(fields.get(TP_KEY))
    if divisor is None or ranks is None:
        return None
    source = f"{DIVISOR_KEY}={divisor} x {TP_KEY}={ranks} in {record.where}"
    return RecordedPadding(divisor * ranks, source)


def _gate_up_order(record: Record, key: str) -> GateUpOrder:
    """How a fused fc1 split over the tensor-parallel size `key` holds gate and up."""
    if key not in record.fields:
        return GateUpOrder()
    value = record.fields[key]
    ranks = _count(value)
    saved = f"saved with {key}={cut_to(repr(value), 40)} ({record.where})"
    if ranks is None:
        return GateUpOrder(unknown=f"a fused linear_fc1 {saved}, which is not a rank count")
    if ranks == 1:
        return GateUpOrder()
    if record.ckpt_format == SPLITS_PER_RANK:
        return GateUpOrder(ranks=ranks)
    fused = f"a fused linear_fc1 (gate and up in one tensor) {saved}: each rank holds [gate; up]"
    if record.ckpt_format == CONVERTED_FROM:
        return GateUpOrder(
            unknown=f"{fused}, and the record names ckpt_format 'torch_dist', so it was"
            " converted (Megatron-LM's checkpoint_inspector convert-torch-dist-to-fsdp-dtensor)"
            " without --swiglu, which leaves fc1 as torch_dist gathered it, in an order no"
            " record here proves; re-run the conversion with --swiglu, which splits it"
        )
    named = (
        f"ckpt_format {cut_to(repr(record.ckpt_format), 40)}, which Megatron saves with one"
        " rank only"
        if record.ckpt_format is not None
        else "no checkpoint format"
    )
    return GateUpOrder(
        unknown=f"{fused}, and the record names {named}, so whether they lie one after"
        " another or gathered as [gate; up] is not known"
    )
