"""What `mfsdp ckpt inspect` shows: a checkpoint described as plain data, then as text."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check import value_head
from mfsdp_ckpt.check.group_meta import group_meta_entries, group_meta_root, summarise
from mfsdp_ckpt.check.printable import printable
from mfsdp_ckpt.check.removed_while_read import describes_checkpoint
from mfsdp_ckpt.check.trainer_step import ITERATION_KEY, checkpoint_step, trainer_step_problems
from mfsdp_ckpt.convert.megatron_lora import stored_adapter_summary
from mfsdp_ckpt.convert.mtp import DROP_MTP_FLAG, stored_mtp
from mfsdp_ckpt.errors import CheckpointFormatError, MfsdpError
from mfsdp_ckpt.format import checkpoint_resolution, layout, state_keys
from mfsdp_ckpt.format.bridge_run_config import missing_run_config
from mfsdp_ckpt.format.dir_entries import children, is_file
from mfsdp_ckpt.format.folder_step import ShownStep, step_words
from mfsdp_ckpt.format.manifest import Manifest, ManifestError, read_manifest
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.format.optimizer_states import HeldStates
from mfsdp_ckpt.lora import (
    ByteProgress,
    base_model_problems,
    read_base_model,
    read_lora_settings,
)
from mfsdp_ckpt.retention import doomed_entries
from mfsdp_ckpt.storage.blob_decode import load_blob
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointReader, ObjectEntry, TensorEntry

# Non-tensor entries decoded to show their value: small ones only, a bounded number of them.
MAX_DECODED_OBJECT_BYTES = 64 << 10
MAX_DECODED_OBJECTS = 512
MAX_SHOWN_VALUE_CHARS = 60
MAX_NAME_CHARS = 200  # a tensor name column wider than this is a crafted name
_SCALARS = (bool, int, float, str)
_NO_STORAGE = "no storage entry"


def describe_object(reader: CheckpointReader, entry: ObjectEntry, decode: bool) -> dict:
    """Key, kind and byte size of a non-tensor entry; for a scalar also its value.

    Decoding goes only through the reader's restricted loader, which builds plain data and
    tensors and refuses anything else: numpy RNG state shows as "not decoded" (Megatron-LM's
    argparse.Namespace too, which `describe_entry` reads otherwise), and nothing stored in the
    checkpoint ever runs. A value torch's weights-only load cannot read (a set or bytes at
    pickle protocol 3-5) is read by the restricted unpickler as plain data, as a stock load
    reads it."""
    described = {
        "name": entry.name,
        "kind": "opaque",
        "bytes": entry.length,
        "value": None,
        "not_decoded": None,
        "note": None,
    }
    if entry.file is None:
        described["not_decoded"] = _NO_STORAGE
        return described
    if not decode or entry.length > MAX_DECODED_OBJECT_BYTES:
        described["not_decoded"] = "too large or too many to decode"
        return described
    from mfsdp_ckpt.check.object_pickles import (
        refused_decode_note,
        restricted_plain_value,
        torch_refuses,
    )

    stored = _read_by_step_check(reader, entry.name)
    raw = None
    try:
        if stored is None:
            raw = reader.object_bytes(entry.name)
            # a refusal told from the pickle's names, without importing torch
            refused = torch_refuses(reader, entry, raw)
            where = f"{reader.root} [{entry.name}]"
            stored = None if refused else (load_blob(raw, entry.transforms, where),)
    except CheckpointFormatError:  # torch's load stopped: plain data it cannot read?
        stored = restricted_plain_value(reader, entry, raw) if raw is not None else None
    except CheckpointFileError:
        stored = None
    if stored is None:
        described["not_decoded"] = refused_decode_note(reader, entry, raw)
        return described
    (value,) = stored
    described["kind"] = type(value).__name__
    if isinstance(value, _SCALARS):
        described["value"] = value if not isinstance(value, str) else value[:MAX_SHOWN_VALUE_CHARS]
    return described


def _read_by_step_check(reader: CheckpointReader, name: str) -> tuple[Any] | None:
    """(value,) of a record the step check (`trainer_step`: `iteration`, `extra.*`) read
    already, kept on the reader (`reader.decoded`) as that check reads it, so that its blob
    is read once; None for any other entry, or one that check did not read or could not."""
    if name != ITERATION_KEY and not name.startswith(state_keys.EXTRA_KEY_PREFIX):
        return None
    return reader.decoded.peek(name)


def describe_entry(
    reader: CheckpointReader, entry: ObjectEntry, decode: bool, for_config: bool
) -> dict:
    """`describe_object`, but for Megatron-LM's `args`: an argparse.Namespace that plain
    decode refuses (it holds dtypes, enums, partials), described as what it is, the run's
    settings, read through the restricted Namespace reader the model config is derived
    with (`megatron_record.read_args`, once per reader: every other class stays a name,
    nothing runs). `for_config`: the model line's config derives from it. An `args` that
    reader refuses, or that holds no Namespace, is described by `describe_object` (an
    opaque one with that reader's reason)."""
    from mfsdp_ckpt.convert.megatron_record import ARGS_KEY, read_args

    if entry.name != ARGS_KEY or entry.file is None:
        return describe_object(reader, entry, decode)
    try:
        fields = read_args(reader)
    except (CheckpointFormatError, CheckpointFileError) as err:
        described = describe_object(reader, entry, decode)
        if described["kind"] != "opaque":
            return described
        return {**described, "not_decoded": str(err).split("]: ", 1)[-1]}
    if fields is None:  # it holds None: as plain decode says it
        return describe_object(reader, entry, decode)
    read = ", read for the model config" if for_config else ""
    return {
        "name": entry.name,
        "kind": "Namespace",
        "bytes": entry.length,
        "value": None,
        "not_decoded": None,
        "note": f"argparse.Namespace of {len(fields)} settings{read}",
    }


def describe_weights(tensors: Mapping[str, TensorEntry]) -> dict:
    """Which entries hold the model's weights and the optimizer's state
    (`state_keys.state_roots`) among a checkpoint's tensors (the HF Trainer's two DCP dirs'
    together), with their tensor counts; when two model entries could each be the model,
    `problem` says so and validate and export-hf refuse the checkpoint (inspect still
    lists every tensor)."""
    try:
        roots = state_keys.state_roots(tensors)
    except state_keys.AmbiguousStateError as err:
        return {
            "entries": [],
            "tensors": 0,
            "optimizer": None,
            "optimizer_state_tensors": 0,
            "problem": str(err),
        }
    return {
        "entries": list(roots.models),
        "tensors": len(roots.weight_keys(tensors)),
        "optimizer": roots.optimizer,
        "optimizer_state_tensors": sum(1 for k in tensors if roots.state_path(k) is not None),
        "problem": None,
    }


def describe_optimizer_kind(
    tensors: Mapping[str, TensorEntry], settings: Collection[str] = ()
) -> dict | None:
    """Which optimizer's state the checkpoint holds, as validate recognises it: `name` (None:
    no known optimizer keeps that set) and the `states` names, so that a resume's optimizer
    setting can be matched to it; None without optimizer state, or when two model entries
    leave the weights undecided (`describe_weights` says so)."""
    from mfsdp_ckpt.check.optimizer_checks import optimizer_kind

    try:
        roots = state_keys.state_roots(tensors)
    except state_keys.AmbiguousStateError:
        return None
    kind = optimizer_kind(tensors, roots, settings)
    return None if kind is None else asdict(kind)


def describe_flat_optimizer(
    tensors: Mapping[str, TensorEntry], objects: Collection[str]
) -> dict | None:
    """Megatron's optimizer state in a flat form (dp_reshardable buffers, a
    dp_zero_gather_scatter object), found as validate finds it
    (`optimizer_checks.flat_state_alone`): `form`, `first` (the first key holding it),
    `states` and `summary` (validate's words). Said as "no optimizer state", it sent users
    to look for a resume state that is there. None where none is held, or where two model
    entries leave the weights undecided."""
    from mfsdp_ckpt.check.optimizer_checks import flat_state_alone

    try:
        roots = state_keys.state_roots(tensors)
    except state_keys.AmbiguousStateError:
        return None
    flat = flat_state_alone(tensors, roots, objects)
    if flat is None:
        return None
    return {
        "form": flat.form,
        "first": flat.first,
        "states": list(flat.states),
        "summary": flat.describe(),
    }


def describe_recorded_model(paths: layout.CheckpointPaths, reader: CheckpointReader) -> dict | None:
    """The Hugging Face config export derives from the checkpoint's own record of its model
    (Megatron-LM's args, Megatron-Bridge's run_config.yaml) with export's notes on how it
    was made (a position limit taken from the training length), or why it derives none; None
    when there is no such record, or when the checkpoint holds its own Hugging Face config
    (Megatron-Bridge's iter_N/hf/), which export reads instead; a Bridge step without its
    run_config.yaml is said as export-hf says it (`missing_run_config`). Read through the
    restricted unpickler / safe YAML."""
    from mfsdp_ckpt.convert.megatron_record import has_recorded_config, recorded_config

    own_config = paths.hf_assets is not None and paths.hf_assets.joinpath(HF_CONFIG_FILE).is_file()
    if own_config:
        return None
    # a Bridge step saved without run_config.yaml: export-hf's and validate's line for it
    missing = missing_run_config(paths)
    unrecorded: dict | None = (
        None
        if missing is None
        else {
            "source": None,
            "config": None,
            "problem": f"{paths.step_dir}: {missing}",
            "notes": [],
        }
    )
    if not has_recorded_config(paths, reader):
        return unrecorded
    try:
        derived = recorded_config(paths, reader)
    except MfsdpError as err:
        return {"source": None, "config": None, "problem": str(err), "notes": []}
    if derived is None:
        return unrecorded
    return {
        "source": derived.source,
        "config": derived.config,
        "problem": None,
        "notes": derived.notes,
    }


def describe_lora(
    manifest: Manifest | None, source: str, *, deep: bool, progress: ByteProgress | None = None
) -> dict | None:
    """A LoRA checkpoint's adapter settings, its base model and whether the base on disk is
    the one the adapter was trained on (sizes; with `deep`, each file's digest under the
    algorithm its record names, which reads every byte of the base, reported to `progress`
    as (bytes hashed, bytes to hash)); None when the
    checkpoint is not LoRA. `base_check.hashes_checked` names the algorithms checked."""
    if manifest is None or manifest.lora is None:
        return None
    config = manifest.lora
    described: dict = {
        "rank": config.get("r"),
        "alpha": config.get("lora_alpha"),
        "scale": None,
        "use_rslora": config.get("use_rslora", False),  # a bool: Manifest.from_json checked it
        "target_modules": config.get("target_modules"),
        "base_model": None,
        "base_check": {"status": "not_checked", "hashes_checked": [], "problems": []},
    }
    check = described["base_check"]
    try:
        described["scale"] = read_lora_settings(manifest, source).scale
        record = read_base_model(manifest, source)
    except ManifestError as err:
        check.update(status="failed", problems=[str(err)])
        return described
    if record is None:
        check["problems"] = [f"{source}: no 'base_model' record"]
        check["status"] = "failed"
        return described
    described["base_model"] = {
        "path": record.path,
        "random_init": record.random_init,
        "seed": record.seed,
        "files": [{"name": name, **r.to_json()} for name, r in record.files.items()],
    }
    errors, notes = base_model_problems(record, deep=deep, progress=progress)
    if errors:
        check.update(status="failed", problems=[f"{where}: {what}" for where, what in errors])
    elif notes:
        check["problems"] = notes  # nothing on disk to compare: stays not_checked
    else:
        algorithms = sorted({r.algorithm for r in record.files.values()}) if deep else []
        check.update(status="ok", hashes_checked=algorithms)
    return described


# What a description records in place of what it could not read
_UNREAD_KEYS = ("problem", "problems", "not_decoded")


def records_unread(described: object) -> bool:
    """Whether a description (or any part of it) holds something it could not read: a
    problem, an entry not decoded. A step removed while such a description was made is
    said to be removed (`describes_checkpoint`); a whole one is printed."""
    if isinstance(described, dict):
        return any(described.get(key) for key in _UNREAD_KEYS) or any(
            records_unread(value) for value in described.values()
        )
    if isinstance(described, list):
        return any(records_unread(value) for value in described)
    return False


# verl's dataloader state beside a step's checkpoint: RL's ray_trainer saves `data.pt`, SFT
# one `data_<rank>.pt` per rank (mfsdp_ckpt/format/layout.py); a torch.save, never read here
_VERL_DATALOADER_RE = re.compile(r"^data(_[0-9]+)?\.pt\Z")
_VERL_KINDS = (layout.VERL_RL_V1, layout.VERL_RL_V2, layout.VERL_SFT, layout.VERL_SFT_V2)


def verl_dataloader_state(paths: layout.CheckpointPaths) -> list[Path]:
    """The files of verl's dataloader state in a verl step dir, sorted: a verl resume reads
    them to go on with the same batches, mfsdp does not. `contents` named the checkpoint's
    DCP entries alone, and a user deciding whether a run resumes exactly saw no word of
    them. Empty for other layouts, whose files of that name are not verl's."""
    step = paths.step_dir
    if paths.kind not in _VERL_KINDS or step is None:
        return []
    names = [name for name in children(step) if _VERL_DATALOADER_RE.match(name)]
    return [step / name for name in names if is_file(step / name)]


def run_warnings(paths: layout.CheckpointPaths) -> list[dict[str, str]]:
    """What validate warns of in the run the step was read from, as its findings say it
    (where, message): what a later save's `checkpoint.keep_last` deletes that is no
    complete step (`retention.doomed_entries`): an old step whose removal was stopped,
    hidden beside the steps and holding a step's gigabytes, and a step dir without
    manifest. Empty when no run dir was read (a step dir or a bare DCP dir was given)."""
    if paths.run_dir is None:
        return []
    return [
        {"where": str(where), "message": doomed} for where, doomed in doomed_entries(paths.run_dir)
    ]


@describes_checkpoint(records_unread)  # a step keep_last removes meanwhile is said to be so
def describe_checkpoint(
    path: str | os.PathLike,
    *,
    role: str | None = None,
    deep: bool = False,
    progress: ByteProgress | None = None,
) -> dict:
    """`deep`: also hash a LoRA checkpoint's base model files (`progress` gets (bytes hashed,
    bytes to hash) meanwhile). `file_digests` names the
    algorithms the manifest records its files with (what `validate --deep` checks)."""
    paths = checkpoint_resolution.resolve_checkpoint(path, role=role)
    reader = CheckpointReader(paths.dist_ckpt)
    manifest = (
        read_manifest(paths.manifest)
        if paths.manifest and os.path.lexists(paths.manifest)
        else None
    )
    manifest_step = manifest.step if manifest else None
    shown = checkpoint_step(paths, reader)
    recorded_model = describe_recorded_model(paths, reader)
    args_for_config = recorded_model is not None and paths.run_config is None
    # the HF Trainer keeps the optimizer state in a DCP dir of its own: listed alike
    readers = [reader]
    if paths.optimizer_dcp is not None:
        readers.append(CheckpointReader(paths.optimizer_dcp))
    # the step's records first: what they decode, the objects' rows show (read once)
    step_problems = [
        f"{where}: {problem}"
        for where, problem in trainer_step_problems(
            paths, reader, {"its directory": paths.step, "its manifest": manifest_step}
        )
    ]
    every_tensor = {k: e for each in readers for k, e in each.tensors.items()}
    object_keys = [k for each in readers for k in each.objects]
    weights = describe_weights(every_tensor)
    readable = weights["problem"] is None  # two model entries: nothing reads the weights
    tensors: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    object_count = 0  # the entries `objects` describes: Megatron's group settings as one
    shared_bytes = 0
    for each in readers:
        sharing = each.sharing
        shared_bytes += sharing.alias_bytes
        tensors += [
            {
                "name": entry.name,
                "shape": list(entry.shape),
                "dtype": entry.dtype.name,
                "chunks": len(entry.chunks),
                "bytes": entry.nbytes,
                # a tied output layer stored once: the tensor whose bytes this one names
                "shares_bytes_of": sharing.aliases.get(entry.name),
            }
            for entry in each.tensors.values()
        ]
        objects += _describe_objects(each, args_for_config, shown=len(objects))
        object_count += len(each.objects)
    groups = Counter(entry["name"].split(".", 1)[0] for entry in tensors)
    # a group of non-tensor entries alone (verl's lr_scheduler, Megatron-LM's
    # opt_param_scheduler and iteration) is held as much as one of tensors
    held = sorted({*groups, *(entry["name"].split(".", 1)[0] for entry in objects)})
    return {
        "checkpoint": str(paths.dist_ckpt),
        "optimizer_checkpoint": None if paths.optimizer_dcp is None else str(paths.optimizer_dcp),
        "step": shown.step,
        "step_from": shown.source,  # "folder_name" where the files record no step
        # the step a resume continues from, where its record disagrees (`trainer_step`)
        "step_problems": step_problems,
        "layout": paths.kind,
        "recorded_model": recorded_model,
        "role": paths.role,
        "roles": list(paths.roles),
        "note": paths.note,
        "contents": manifest.contents if manifest else held,
        "dataloader_state": [str(path) for path in verl_dataloader_state(paths)],
        "warnings": run_warnings(paths),
        "world_size": manifest.world_size if manifest else None,
        "strategy": manifest.strategy if manifest else None,
        "model_family": manifest.model_family if manifest else None,
        "created_at": manifest.created_at if manifest else None,
        "file_digests": sorted({r.algorithm for r in manifest.files.values()}) if manifest else [],
        "lora": describe_lora(manifest, str(paths.manifest), deep=deep, progress=progress),
        "weights": weights,
        "optimizer_kind": describe_optimizer_kind(every_tensor, object_keys),
        "flat_optimizer": describe_flat_optimizer(every_tensor, object_keys),
        "megatron_adapter": stored_adapter_summary(reader) if readable else None,
        "mtp": _describe_mtp(reader) if readable else None,
        "value_head": _describe_value_head(paths, reader) if readable else None,
        "tensors": tensors,
        "objects": objects,
        "totals": {
            "tensors": len(tensors),
            "bytes": sum(t["bytes"] for t in tensors),
            "shared_bytes": shared_bytes,  # of those, named twice but stored once
            "by_group": {group: count for group, count in sorted(groups.items())},
            "files": sum(len(each.files()) for each in readers),
            "objects": object_count,
        },
    }


def _describe_objects(
    reader: CheckpointReader, args_for_config: bool, shown: int
) -> list[dict[str, Any]]:
    """The reader's non-tensor entries by name, decoded while fewer than MAX_DECODED_OBJECTS
    are (`shown` before these); those of Megatron's `param_to_group_meta` as one line
    (`group_meta`), ~20 per parameter."""
    grouped = group_meta_entries(reader.objects.values())
    rows: list[tuple[str, ObjectEntry | list[ObjectEntry]]] = [
        (entry.name, entry)
        for entry in reader.objects.values()
        if group_meta_root(entry.name) is None
    ]
    described: list[dict[str, Any]] = []
    for name, found in sorted([*rows, *grouped.items()], key=lambda row: row[0]):
        if isinstance(found, list):
            described.append(summarise(reader, name, found))
            continue
        decode = shown + len(described) < MAX_DECODED_OBJECTS
        described.append(describe_entry(reader, found, decode, args_for_config))
    return described


def format_description(description: dict) -> str:
    """The description as terminal text: names escaped and cut (mfsdp_ckpt.check.printable), so a
    crafted name can neither drive the terminal nor widen every line of the table."""
    lines = [f"checkpoint  {printable(description['checkpoint'])}"]
    if description.get("optimizer_checkpoint"):
        lines.append(f"optimizer   {printable(description['optimizer_checkpoint'])}")
    lines += [
        f"step        {step_words(ShownStep(description['step'], description.get('step_from')))}",
        *(f"            {printable(problem)}" for problem in description.get("step_problems", [])),
        f"contents    {printable(', '.join(description['contents']))}",
    ]
    lines += [
        f"warning     {printable(warning['where'])}: {printable(warning['message'])}"
        for warning in description.get("warnings", [])
    ]
    if loader := description.get("dataloader_state"):
        files = ", ".join(os.path.basename(path) for path in loader)
        lines.append(
            f"dataloader  {printable(files)} in {printable(os.path.dirname(loader[0]))}: verl's"
            " dataloader state, which mfsdp does not read"
        )
    lines.append(
        f"layout      {description['layout']}"
        + (
            f" ({description['role']}; roles: {', '.join(description['roles'])})"
            if description["role"]
            else ""
        )
    )
    for key in ("world_size", "strategy", "model_family", "created_at"):
        if description[key] is not None:
            lines.append(f"{key:<11} {printable(description[key])}")
    model = [_recorded_line(recorded)] if (recorded := description.get("recorded_model")) else []
    if (mtp := description.get("mtp")) is not None:
        model.append(
            f"{'plus ' if model else ''}{mtp['summary']} beside the decoder:"
            f" export-hf {DROP_MTP_FLAG} leaves them out"
        )
    if model:
        lines.append(f"model       {printable('; '.join(model))}")
    lines += [f"            {printable(note)}" for note in (recorded or {}).get("notes", [])]
    if (weights := description.get("weights")) is not None:
        kind = description.get("optimizer_kind")
        flat = description.get("flat_optimizer")
        lines.append(f"weights     {printable(_weights_line(weights, kind, flat))}")
    if description["file_digests"]:
        lines.append(f"digests     {', '.join(description['file_digests'])} (manifest.json)")
    if description.get("lora") is not None:
        lines += format_lora(description["lora"])
    if description.get("megatron_adapter") is not None:
        lines.append(f"lora        {printable(description['megatron_adapter'])}")
    if description.get("value_head") is not None:
        lines.append(f"value head  {printable(description['value_head'])}")
    names = [printable(t["name"], MAX_NAME_CHARS) for t in description["tensors"]]
    width = max((len(name) for name in names), default=4)
    lines.append("")
    lines.append(f"{'name':<{width}}  {'shape':<16} {'dtype':<9} {'chunks':>6} {'MiB':>9}")
    for name, tensor in zip(names, description["tensors"]):
        shape = "x".join(map(str, tensor["shape"])) or "scalar"
        shared = tensor["shares_bytes_of"]
        shared = f"  shares the bytes of {printable(shared, MAX_NAME_CHARS)}" if shared else ""
        lines.append(
            f"{name:<{width}}  {shape:<16} {tensor['dtype']:<9} {tensor['chunks']:>6} "
            f"{tensor['bytes'] / 2**20:>9.2f}{shared}"
        )
    if description["objects"]:
        object_names = [printable(o["name"], MAX_NAME_CHARS) for o in description["objects"]]
        width = max(len(name) for name in object_names)
        kinds = [printable(o["kind"], MAX_NAME_CHARS) for o in description["objects"]]
        kind_width = max(8, *map(len, kinds))
        lines.append("")
        lines.append(f"{'non-tensor entry':<{width}}  {'kind':<{kind_width}} {'bytes':>9}  value")
        for name, kind, entry in zip(object_names, kinds, description["objects"]):
            value = printable(repr(entry["value"])) if entry["value"] is not None else ""
            value = printable(entry["note"]) if entry.get("note") else value
            value = f"(not decoded: {entry['not_decoded']})" if entry["not_decoded"] else value
            row = f"{name:<{width}}  {kind:<{kind_width}} {entry['bytes']:>9}  {value}"
            lines.append(row.rstrip())
    totals = description["totals"]
    groups = printable(
        ", ".join(f"{printable(g, MAX_NAME_CHARS)} {n}" for g, n in totals["by_group"].items())
    )
    lines.append("")
    shared = (
        f" ({totals['shared_bytes'] / 2**20:.2f} MiB of it aliases other tensors' bytes)"
        if totals["shared_bytes"]
        else ""
    )
    lines.append(
        f"total       {totals['tensors']} tensors ({groups}), {totals['bytes'] / 2**20:.2f} MiB"
        f"{shared} in {totals['files']} data files, {totals['objects']} non-tensor entries"
    )
    return "\n".join(lines)


def _describe_value_head(paths: layout.CheckpointPaths, reader: CheckpointReader) -> str | None:
    """A verl critic's value head (`value_head`) in words; None for any other role."""
    if paths.role != value_head.CRITIC:
        return None
    head = value_head.value_head(reader, state_keys.state_roots(reader.tensors))
    if not head.keys:
        return f"none: a verl critic saves it as {value_head.WEIGHT} ({value_head.MADE_BY})"
    return (
        f"{head.summary()} ({value_head.MADE_BY}; validate checks it, export-hf exports"
        " the actor only)"
    )


def _describe_mtp(reader: CheckpointReader) -> dict | None:
    """The multi-token prediction layers among the weights (`mtp`), or None."""
    mtp = stored_mtp(reader)
    return None if mtp is None else {**mtp.counts(), "summary": mtp.summary()}


def _weights_line(weights: dict, kind: dict | None, flat: dict | None = None) -> str:
    """`app.model.* (27 tensors); optimizer state app.optim.state.* (81 tensors): Adam
    (exp_avg, exp_avg_sq, step)`; `kind`: the description's `optimizer_kind`, `flat` its
    `flat_optimizer` (said in validate's words, with the first key holding it)."""
    if weights["problem"] is not None:
        return f"not read: {weights['problem']}"
    entries = weights["entries"]
    if not entries:
        where = f"none found ({state_keys.NO_MODEL_WEIGHTS})"
    elif entries == [""]:
        where = f"at the top level ({weights['tensors']} tensors)"
    else:
        where = f"{', '.join(e + '.*' for e in entries)} ({weights['tensors']} tensors)"
    if weights["optimizer_state_tensors"]:
        state = f"{weights['optimizer']}.state.* ({weights['optimizer_state_tensors']} tensors)"
        if kind is not None:
            state += f": {HeldStates(kind['name'], tuple(kind['states']))}"
        return f"{where}; optimizer state {state}"
    if flat is not None:
        return f"{where}; {flat['summary']}, first [{flat['first']}]"
    return f"{where}; no optimizer state"


def _recorded_line(recorded: dict) -> str:
    config = recorded["config"]
    if config is None:
        return f"no Hugging Face config derived: {recorded['problem']}"
    count = config.get("num_experts", config.get("num_local_experts"))
    experts = f", {count} experts (top-{config['num_experts_per_tok']})" if count else ""
    return (
        f"{config['architectures'][0]}, {config['num_hidden_layers']} layers, hidden"
        f" {config['hidden_size']}{experts}, vocab {config['vocab_size']} (from"
        f" {recorded['source']}; export-hf writes this config.json)"
    )


def format_lora(lora: dict) -> list[str]:
    """The LoRA lines of `inspect`: adapter settings, base model, and the base check's verdict."""
    targets = lora["target_modules"]
    targets = ", ".join(map(str, targets)) if isinstance(targets, list) else str(targets)
    scale = f" (scale {lora['scale']:g})" if lora["scale"] is not None else ""
    lines = [f"lora        rank {lora['rank']}, alpha {lora['alpha']}{scale}, targets {targets}"]
    lines[0] = printable(lines[0])
    base = lora["base_model"]
    if base is not None:
        files = len(base["files"])
        where = f"{base['path']} ({files} weight file{'s' * (files != 1)})"
        if base["random_init"]:
            where = f"random init, seed {base['seed']}"
        lines.append(f"base model  {printable(where)}")
    check = lora["base_check"]
    checked = " and ".join(check["hashes_checked"])
    verdict = {
        "ok": f"sizes and {checked} match"
        if checked
        else "sizes match (digests not checked: --deep)",
        "failed": "FAILED",
        "not_checked": "not checked",
    }[check["status"]]
    lines.append(f"base check  {verdict}")
    lines += [f"            {printable(problem)}" for problem in check["problems"]]
    return lines
