"""What a LoRA checkpoint says about itself: which base model it adapts and how.

A LoRA step's dist_ckpt holds only the adapter (and its optimizer state): the weights it
adapts live in the base model directory, or in the checkpoint the run started from (an SFT
step: then its DCP dir). The manifest therefore records that base (its path and the size
and digest of each weight file, hashed once per run) and the adapter's PEFT config, so
that years later `validate` can tell whether the base on disk is still the one the adapter
was trained on, and export can merge or write a PEFT adapter without the code that
trained it.

Adapter weights are stored under the names PEFT gives them inside the model
(`model.layers.0.self_attn.q_proj.lora_A.default.weight`); `peft_name` maps them to the
names of a saved PEFT adapter (`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`).
No torch here: validate and export plan with plain records.
"""

from __future__ import annotations

import os
import re
import stat
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.check.report import ERROR, WARNING, ValidationReport
from mfsdp_ckpt.format.file_hash import (
    WRITE_ALGORITHM,
    ByteProgress,
    FileRecord,
    HashedBytes,
    hash_file,
    hash_files,
    rehash_like,
)
from mfsdp_ckpt.format.layout import DCP_METADATA_FILE
from mfsdp_ckpt.format.lora_fields import (
    BaseModelRecord,
    LoraSettings,
    not_plain_lora,
    plain_lora_init,
    recorded_lora_settings,
)
from mfsdp_ckpt.format.manifest import Manifest, ManifestError
from mfsdp_ckpt.format.model_files import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE
from mfsdp_ckpt.storage.safetensors_source import SafetensorsError, chosen_files

BASE_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
DCP_DATA_SUFFIX = ".distcp"  # a DCP dir's data files, beside the .metadata that indexes them
# The day LoRA runs started from a checkpoint (model.path an SFT step, a run, an import-hf
# result, a bare DCP dir) first recorded its files: before it, their base record was empty.
BASE_FILES_RECORDED_SINCE = "2026-12-06"
MAX_ADAPTER_CONFIG_BYTES = 1 << 20  # an adapter_config.json is about 1 KB
PEFT_PREFIX = "base_model.model."  # what PeftModel puts in front of the model's own names
_ADAPTER_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<which>[AB])\.(?P<adapter>[^.]+)\.weight$")


@dataclass(frozen=True)
class AdapterKey:
    """One stored adapter matrix: the module it adapts, A or B, and PEFT's adapter name."""

    module: str
    which: str
    adapter: str


def parse_adapter_key(name: str) -> AdapterKey | None:
    """`model.layers.0.mlp.up_proj.lora_B.default.weight` ->
    (`model.layers.0.mlp.up_proj`, `B`, `default`); None for any other name."""
    match = _ADAPTER_KEY.match(name)
    return AdapterKey(match["module"], match["which"], match["adapter"]) if match else None


def peft_name(key: AdapterKey) -> str:
    """The tensor name a saved PEFT adapter (adapter_model.safetensors) uses."""
    return f"{PEFT_PREFIX}{key.module}.lora_{key.which}.weight"


# --------------------------------------------------------------------------- base model
def base_weight_files(base_dir: str | os.PathLike) -> list[str]:
    """The weight files of a model dir that make up the model (HF cache snapshots link them:
    links are followed): its safetensors as transformers picks them, which is what training
    loads (model.safetensors, else the files its index names, else the one file there is;
    a model_old.safetensors or Mistral's consolidated.safetensors beside them is no part of
    the model, and a merge that read it took its tensors); with no safetensors, every
    *.bin, *.pt and *.pth there. A checkpoint's DCP dir (`is_dcp_dir`: a run started from
    a checkpoint) is its .metadata and *.distcp files: a model dir's rule found none
    there. SafetensorsError for safetensors transformers cannot pick from (several and no
    index, a damaged index)."""
    root = Path(base_dir)
    if is_dcp_dir(root):
        return sorted(
            name
            for name in os.listdir(root)
            if name == DCP_METADATA_FILE or name.endswith(DCP_DATA_SUFFIX)
        )
    found = sorted(
        entry.name
        for entry in root.iterdir()
        if entry.name.endswith(BASE_WEIGHT_SUFFIXES) and entry.is_file()
    )
    if not any(name.endswith(".safetensors") for name in found):
        return found
    return chosen_files(root, [])[0]


def is_dcp_dir(path: str | os.PathLike) -> bool:
    """Whether `path` is a checkpoint's DCP dir (its .metadata there), not a model dir."""
    return (Path(path) / DCP_METADATA_FILE).is_file()


def records_dcp(record: BaseModelRecord) -> bool:
    """Whether `record` lists a checkpoint's DCP files (a run whose model.path was a
    checkpoint): the merge then reads that checkpoint as export does, not safetensors."""
    return DCP_METADATA_FILE in record.files


def unrecorded_base(record: BaseModelRecord) -> str | None:
    """Why the base of `record` cannot be checked at all, or None where it can: a record of
    weights on disk that lists no file. A run whose model.path was a checkpoint wrote such a
    record before BASE_FILES_RECORDED_SINCE (a model dir's rule found no weight file in
    it): nothing can tell whether that path still holds the weights the adapter trained on,
    so resume and the merged export refuse it, and validate warns (docs/upgrading.md)."""
    if record.random_init or record.path is None or record.files:
        return None
    return (
        f"no weight files are recorded for the base model {record.path} (a LoRA run whose"
        " model.path was a checkpoint recorded none before"
        f" {BASE_FILES_RECORDED_SINCE}), so nothing can check that it still holds the"
        " weights the adapter was trained on"
    )


def describe_base_model(
    path: str | None,
    *,
    random_init: bool,
    seed: int | None,
    workers: int = 4,
    algorithm: str = WRITE_ALGORITHM,
) -> BaseModelRecord:
    """Record the base a LoRA run adapts, hashing its weight files (every byte of the base,
    so the trainer does it once per run, in the background) wherever their links lead, as
    training loaded them (a Hugging Face cache snapshot's into its blobs/, a `--local-dir`
    download's into the cache)."""
    if path is None or random_init:
        return BaseModelRecord(str(Path(path).resolve()) if path else None, True, seed)
    root = Path(path).resolve()
    files = hash_files(root, base_weight_files(root), workers, algorithm, links_anywhere=True)
    return BaseModelRecord(str(root), False, seed, files)


def rehashed_like(
    current: BaseModelRecord, trained_on: BaseModelRecord, workers: int = 4
) -> BaseModelRecord:
    """`current` with each file `trained_on` records hashed as it records it, so that
    `base_mismatch` compares like for like: again under that algorithm when `current` used
    another (an adapter saved before XXH3 recorded sha256), and at all when `current` left
    it out but the base dir has it (a run before `base_weight_files` picked the model's
    files recorded every weight file there: such a file must still be there, unchanged, as
    then); `current` itself when nothing differs."""
    root = Path(current.path) if current.path is not None else None
    stale = {
        name: record
        for name, record in trained_on.files.items()
        if (name in current.files and current.files[name].algorithm != record.algorithm)
        or (name not in current.files and root is not None and (root / name).is_file())
    }
    if not stale or current.path is None:
        return current
    return replace(
        current,
        files={**current.files, **rehash_like(current.path, stale, workers, links_anywhere=True)},
    )


def read_base_model(manifest: Manifest, source: str = "manifest.json") -> BaseModelRecord | None:
    """The base record of a LoRA manifest, read as `Manifest.from_json` checked it."""
    if manifest.base_model is None:
        return None
    return BaseModelRecord.from_dict(manifest.base_model, source)


def adapter_without_base_weights(checkpoint: Path) -> bool:
    """Whether `checkpoint` (a step dir, or a run dir: its latest step) is a LoRA step whose
    recorded base has no weights on disk to merge onto (`lora_fields.base_weights_dir`: a
    random init). The merged export refuses such a step, so every command that would advise
    that export (a run's last line, a refusal pointing at export-hf) asks here and names
    `lora_fields.adapter_only_advice` instead. False where `checkpoint` cannot be read as a
    step: export-hf then names what is wrong with it."""
    from mfsdp_ckpt.errors import MfsdpError
    from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
    from mfsdp_ckpt.format.lora_fields import base_weights_dir
    from mfsdp_ckpt.format.manifest import read_manifest

    try:
        paths = resolve_checkpoint(checkpoint)
        manifest = read_manifest(paths.manifest) if paths.manifest is not None else None
        if manifest is None or manifest.lora is None:
            return False
        return base_weights_dir(read_base_model(manifest)) is None
    except (MfsdpError, OSError):
        return False


def base_model_problems(
    record: BaseModelRecord, *, deep: bool, progress: ByteProgress | None = None
) -> tuple[list[tuple[str, str]], list[str]]:
    """(errors as (where, what), cannot-check notes): is the base on disk the recorded one?

    Reads only the files the record names, directly in its directory, and only regular
    files (a FIFO or device there would block or never end); `deep` adds each file's digest
    (the algorithm its record names), which reads every byte of the base (the cheap check
    compares sizes): minutes for a 7B base, so `progress` gets (bytes hashed, bytes to hash)
    as it goes."""
    if record.path is None or record.random_init:
        return [], [f"base model was a random init (seed {record.seed}); nothing on disk to check"]
    unrecorded = unrecorded_base(record)
    if unrecorded is not None:
        return [], [unrecorded]
    root = Path(record.path)
    if not root.is_dir():
        return [], [f"base model dir {root} is not present here; cannot check it"]
    try:
        present = set(base_weight_files(root))
    except OSError as err:
        return [(str(root), f"cannot list the base model dir ({err.strerror})")], []
    except SafetensorsError as err:
        return [(str(root), str(err).removeprefix(f"{root}: "))], []
    errors = [
        (str(root / name), "weight file not in the manifest's base model record")
        for name in sorted(present - set(record.files))
    ]
    hashed = HashedBytes(sum(r.size for r in record.files.values()), progress)
    for name, expected in sorted(record.files.items()):
        problem = _weight_file_problem(root / name, expected, deep, hashed)
        if problem is not None:
            errors.append((str(root / name), problem))
    return errors, []


def _weight_file_problem(
    file: Path, expected: FileRecord, deep: bool, hashed: HashedBytes
) -> str | None:
    try:
        info = os.stat(file)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_size != expected.size:
            return f"has {info.st_size} bytes, the adapter was trained on {expected.size}"
        if deep and hash_file(file, algorithm=expected.algorithm, on_block=hashed.add) != expected:
            return f"{expected.algorithm} differs from the base the adapter was trained on"
    except FileNotFoundError:
        return "base model weight file is missing"
    except OSError as err:
        return f"cannot read it ({err.strerror})"
    return None


def base_mismatch(
    trained_on: BaseModelRecord,
    current: BaseModelRecord,
    *,
    trained: str = "adapter was trained on",
    here: str = "this run's base",
) -> str | None:
    """Why an adapter trained on `trained_on` must not continue on `current`, or None when
    they are the same weights (the same files by size and digest, or the same random init;
    the directory may have moved). Compare `rehashed_like(current, trained_on)`: digests of
    different algorithms never match. `trained` and `here` name the two sides, so that
    other frozen weights (GRPO's KL reference) are told apart in their own words."""
    if trained_on.random_init or current.random_init:
        if trained_on.random_init and current.random_init and trained_on.seed == current.seed:
            return None
        return f"{trained} {_describe(trained_on)}, {here} is {_describe(current)}"
    if trained_on.files == current.files:
        return None
    return f"{trained} {_describe(trained_on)}; in {here} {current.path}, " + _file_difference(
        trained_on.files, current.files
    )


def _file_difference(recorded: dict[str, FileRecord], present: dict[str, FileRecord]) -> str:
    """Which weight file differs between two records that differ, and how: missing, extra,
    or another size (both sizes) or other bytes of the same size (the digest named)."""
    missing = sorted(set(recorded) - set(present))
    extra = sorted(set(present) - set(recorded))
    changed = sorted(
        name for name in set(recorded) & set(present) if recorded[name] != present[name]
    )
    others = [*missing, *extra, *changed][1:]
    more = f" (and {len(others)} more file(s) differ: {first_of(others, 3)})" if others else ""
    if missing:
        return f"{missing[0]} is missing{more}"
    if extra:
        return f"{extra[0]} is a weight file the record does not list{more}"
    then, now = recorded[changed[0]], present[changed[0]]
    if then.size != now.size:
        return f"{changed[0]} has {now.size} bytes, {then.size} recorded{more}"
    return f"{changed[0]} has other bytes of the same size ({then.algorithm} differs){more}"


def _describe(record: BaseModelRecord) -> str:
    if record.random_init:
        return f"a random init (seed {record.seed})"
    return f"the weights in {record.path}"


def check_base_model(
    manifest: Manifest | None,
    report: ValidationReport,
    *,
    deep: bool,
    source: str,
    progress: ByteProgress | None = None,
) -> None:
    """validate's LoRA check: the base named in the manifest is the one present (or a warning
    saying why it cannot be checked). Nothing for checkpoints that are not LoRA. `deep`
    hashes the whole base, reported to `progress` as (bytes hashed, bytes to hash)."""
    if manifest is None or manifest.base_model is None:
        return
    try:
        record = read_base_model(manifest, source)
    except ManifestError as err:
        report.add_error(source, err)
        return
    if record is None:
        return
    errors, notes = base_model_problems(record, deep=deep, progress=progress)
    for where, message in errors:
        report.add(ERROR, where, message)
    for note in notes:
        report.add(WARNING, source, note)


# --------------------------------------------------------------------------- LoRA config
_IN_LAYER = re.compile(r"^.+?\.layers\.(?P<layer>[0-9]+)\.(?P<rest>.+)$")


def peft_target_modules(adapted: Collection[str], num_layers: int | None) -> list[str]:
    """adapter_config.json's target_modules for adapters on the `adapted` module paths, so
    that peft adds adapters exactly there: their own names (q_proj, ...), as verl and peft
    write them, when each of the `num_layers` decoder layers has the same adapted modules;
    else (a regex or layers_to_transform picked some layers, or the layer count is not
    known) the full paths, since by own name peft would adapt every layer and the adapter's
    weights would no longer fit."""
    per_layer: dict[int, set[str]] = defaultdict(set)
    for module in adapted:
        match = _IN_LAYER.match(module)
        if match is None:
            return sorted(adapted)
        per_layer[int(match["layer"])].add(match["rest"])
    rests = set().union(*per_layer.values())
    short = {rest.rsplit(".", 1)[-1] for rest in rests}
    uniform = (
        num_layers is not None
        and sorted(per_layer) == list(range(num_layers))
        and all(found == rests for found in per_layer.values())
        and len(short) == len(rests)
    )
    return sorted(short) if uniform else sorted(adapted)


def read_lora_settings(manifest: Manifest, source: str = "manifest.json") -> LoraSettings:
    """The merge settings of a LoRA manifest, read as `Manifest.from_json` checked them."""
    return recorded_lora_settings(manifest.lora, source)


__all__ = [  # with what training and export import from here that lives in lora_fields
    "ADAPTER_CONFIG_FILE",
    "ADAPTER_WEIGHTS_FILE",
    "BASE_FILES_RECORDED_SINCE",
    "BASE_WEIGHT_SUFFIXES",
    "MAX_ADAPTER_CONFIG_BYTES",
    "PEFT_PREFIX",
    "AdapterKey",
    "BaseModelRecord",
    "ByteProgress",
    "LoraSettings",
    "base_mismatch",
    "base_model_problems",
    "base_weight_files",
    "check_base_model",
    "describe_base_model",
    "is_dcp_dir",
    "not_plain_lora",
    "parse_adapter_key",
    "peft_name",
    "peft_target_modules",
    "plain_lora_init",
    "read_base_model",
    "read_lora_settings",
    "records_dcp",
    "rehashed_like",
    "unrecorded_base",
]
