"""`manifest.json`: what a step directory holds, written last so it marks the step complete.

It records every file with its size and a digest (mfsdp_ckpt/format/file_hash.py: XXH3-128
now, sha256 in manifests written before) so that `validate --deep` can prove the bytes
are the ones that were written, plus enough context (world size, strategy, versions,
contents) to explain a checkpoint years later without the code that wrote it. Its own fields
are covered by a digest of themselves (`manifest_digest.py`), and every field a reader uses
is checked for its JSON type as the manifest is parsed, here, so that validate, inspect,
export and a resume read one manifest the same way (a LoRA run's fields: `lora_fields.py`).

What a newer mfsdp may write is told apart from damage: a newer `format_version`, a content
kind or a file-record field this mfsdp does not know (its digest of itself vouching for
them) is refused as `NewerManifestError`, "written by a newer mfsdp (...): upgrade mfsdp to
read it", not as a damaged manifest. A newer format may write its digest in another form:
one this mfsdp cannot check leaves a newer version newer, one it checks and finds changed
is damage. Still refused (exit 1): nothing here can check what it does not know. Unknown
top-level and `info` keys are read past, as before.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format.file_hash import FileRecord, FileRecordError, NewerRecordError
from mfsdp_ckpt.format.manifest_digest import DIGEST_FIELD, digest_problem, sealed
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError, check_relative_name
from mfsdp_ckpt.storage.unique_json import parse_json

# 2: file records may carry `xxh3_128` instead of `sha256` (version 1 has only sha256).
# Bumped so that an older mfsdp says "newer than this mfsdp reads" instead of "needs sha256".
FORMAT_VERSION = 2
CONTENT_KINDS = ("model", "optimizer", "extra")
MAX_MANIFEST_BYTES = 64 << 20  # ~150 bytes per listed file: far past any real step
MAX_MANIFEST_CONTAINERS = 1 << 20  # one object per listed file, and a few: as far past


class ManifestError(MfsdpFailedError, ValueError):
    """manifest.json is missing a field, has a wrong type, or names an unsafe path."""


class NewerManifestError(ManifestError):
    """manifest.json was written by a newer mfsdp: a format version, a content kind or a
    field this one does not know."""


@dataclass
class Manifest:
    step: int
    world_size: int
    strategy: str
    contents: list[str]
    files: dict[str, FileRecord]
    model_family: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    created_at: str = ""
    save_seconds: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    # LoRA runs only (mfsdp_ckpt/lora.py): the base model the adapter needs, and its PEFT config.
    base_model: dict[str, Any] | None = None
    lora: dict[str, Any] | None = None
    # The CRC of each model record, by data file and blob offset (`check/model_record_crcs`):
    # a top-level field, which an older mfsdp reads past. None: not recorded (not written).
    model_records: dict[str, dict[str, int]] | None = None

    def to_json(self) -> str:
        """The manifest's text, its digest of itself included (`manifest_digest.sealed`)."""
        data = asdict(self)
        data["files"] = {name: record.to_json() for name, record in self.files.items()}
        if self.model_records is None:
            del data["model_records"]
        return json.dumps(sealed(data), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "manifest.json") -> Manifest:
        # a 5000-digit number, [[[[..., 64 MB of [{},{},...] (gigabytes parsed) too
        data = parse_json(text, source, ManifestError, MAX_MANIFEST_CONTAINERS)
        if not isinstance(data, dict):
            raise ManifestError(f"{source}: top level must be an object")
        return cls._from_dict(data, source)

    @classmethod
    def _from_dict(cls, data: dict, source: str) -> Manifest:
        """Every field checked for its JSON type (an int is no bool), the LoRA fields as
        `lora_fields` reads them, then the manifest's digest of itself where it has one."""

        def need(key: str, kind: type | tuple[type, ...]) -> Any:
            if not _is_kind(data.get(key), kind):
                raise ManifestError(f"{source}: field {key!r} is missing or not {_kind_name(kind)}")
            return data[key]

        version = need("format_version", int)
        if version > FORMAT_VERSION:
            raise _newer_version(data, source, version)
        _refuse_newer_digest(data, source)
        step, world_size = need("step", int), need("world_size", int)
        strategy = need("strategy", str)
        if step < 0 or world_size < 1:
            raise ManifestError(f"{source}: step {step} / world_size {world_size} out of range")
        contents = need("contents", list)
        unknown = [c for c in contents if not isinstance(c, str)]
        if unknown:
            raise ManifestError(f"{source}: unknown contents {unknown}")
        newer = [c for c in contents if c not in CONTENT_KINDS]
        if newer:
            known = ", ".join(CONTENT_KINDS)
            raise _newer(
                data, source, f"contents {cut_to(repr(newer), 200)}; this one knows {known}"
            )
        files: dict[str, FileRecord] = {}
        for name, record in need("files", dict).items():
            try:
                if _may_leave(name):
                    check_relative_name(name)
            except CheckpointFileError as err:
                raise ManifestError(f"{source}: {err}") from None
            try:
                files[name] = FileRecord.from_json(record)
            except NewerRecordError as err:
                raise _newer(data, source, f"file record for {name!r} {err}") from None
            except FileRecordError as err:
                raise ManifestError(f"{source}: file record for {name!r} {err}") from None
        optional: dict[str, type | tuple[type, ...]] = {
            "model_family": (str, type(None)),
            "versions": dict,
            "created_at": str,
            "save_seconds": (int, float, type(None)),
            "info": dict,
            "base_model": (dict, type(None)),
            "lora": (dict, type(None)),
            "model_records": dict,
        }
        extras = {}
        for key, kind in optional.items():
            if key in data:
                if not _is_kind(data[key], kind):
                    raise ManifestError(f"{source}: field {key!r} is not {_kind_name(kind)}")
                extras[key] = data[key]
        if not all(isinstance(v, str) for v in extras.get("versions", {}).values()):
            raise ManifestError(f"{source}: field 'versions' holds a version that is not a string")
        _check_lora_fields(extras, source)
        problem = digest_problem(data)
        if problem is not None:
            raise ManifestError(f"{source}: {problem}")
        _check_info(extras.get("info", {}), source)
        _check_model_records(extras.get("model_records", {}), source)
        _check_rank_files(files, world_size, source)
        return cls(
            step=step,
            world_size=world_size,
            strategy=strategy,
            contents=contents,
            files=files,
            format_version=version,
            **extras,
        )


def _newer_line(source: str, what: str) -> str:
    return f"{source}: written by a newer mfsdp ({what}): upgrade mfsdp to read it"


def _newer(data: dict, source: str, what: str) -> ManifestError:
    """The error for `what` (a content kind, a file-record field) this mfsdp does not know,
    at a format version it reads: written by a newer mfsdp where the manifest's digest of
    itself vouches for its fields (or it has none); else damage, which the digest names."""
    problem = digest_problem(data)
    if problem is None:
        return NewerManifestError(_newer_line(source, what))
    return ManifestError(f"{source}: {what}, and {problem}")


def _newer_version(data: dict, source: str, version: int) -> ManifestError:
    """The error for a `format_version` past FORMAT_VERSION. A newer format may change
    anything, the form of its digest too, so a digest this mfsdp cannot read (another
    algorithm, another shape) or none leaves it newer; but one in a form read here that
    does not match says damage: one flipped bit turns version 2 into 3, and "upgrade mfsdp"
    sent the user to an upgrade after which the step still did not read."""
    what = f"format_version {version}; this one reads up to {FORMAT_VERSION}"
    try:
        FileRecord.from_json(data.get(DIGEST_FIELD))
    except FileRecordError:  # none, or in a form only a newer mfsdp may write
        return NewerManifestError(_newer_line(source, what))
    return _newer(data, source, what)


def _refuse_newer_digest(data: dict, source: str) -> None:
    """NewerManifestError where the manifest's digest of itself is in a form only a newer
    mfsdp writes (another algorithm): nothing here can check the other fields with it. Any
    other fault of it is told as damage, where the digest is checked."""
    if DIGEST_FIELD not in data:
        return
    try:
        FileRecord.from_json(data[DIGEST_FIELD])
    except NewerRecordError as err:
        raise NewerManifestError(_newer_line(source, f"field {DIGEST_FIELD!r} {err}")) from None
    except FileRecordError:
        return


# The info fields mfsdp's trainer records that a reader acts on (`run` decides which kind
# of run resumes a step), with their JSON types; another writer's fields are its own.
_NUMBER_OR_NULL = (int, float, type(None))
INFO_FIELDS: dict[str, type | tuple[type, ...]] = {
    "run": str,
    "total_steps": int,
    "cpu_threads": list,
    "train_loss": _NUMBER_OR_NULL,
    "reward_mean": _NUMBER_OR_NULL,
    "rollout": str,
}
_RANK_FILE_RE = re.compile(r"dist_ckpt/__([0-9]{1,9})_[0-9]+\.distcp")


def _check_info(info: dict[str, Any], source: str) -> None:
    """The `INFO_FIELDS` that `info` holds, each of its JSON type, `cpu_threads` a list of
    counts (`info.run` 5 decided nothing and passed every reader)."""
    for key, kind in INFO_FIELDS.items():
        if key in info and not _is_kind(info[key], kind):
            raise ManifestError(f"{source}: field 'info.{key}' is not {_kind_name(kind)}")
    if not all(_is_kind(n, int) and n > 0 for n in info.get("cpu_threads", [])):
        raise ManifestError(f"{source}: field 'info.cpu_threads' holds a count that is no int > 0")


def _check_rank_files(files: dict[str, FileRecord], world_size: int, source: str) -> None:
    """Each DCP data file listed (`dist_ckpt/__R_N.distcp`, written by rank R) of a rank
    below `world_size`, and a file of every such rank: torch's DCP writer writes one per
    rank (an empty one where a rank holds nothing), so a world size that disagrees with
    them is damage."""
    ranks = {int(m.group(1)) for m in map(_RANK_FILE_RE.fullmatch, files) if m is not None}
    if not ranks:
        return  # no data file listed: told where the files are checked
    if max(ranks) >= world_size:
        raise ManifestError(
            f"{source}: lists dist_ckpt files of rank {max(ranks)}, but world_size is {world_size}"
        )
    absent = sorted(set(range(world_size)) - ranks)
    if absent:
        raise ManifestError(
            f"{source}: world_size is {world_size}, but it lists no dist_ckpt file of rank"
            f" {absent[0]} (files of {len(ranks)} rank(s))"
        )


def _check_model_records(records: dict[str, Any], source: str) -> None:
    """`model_records` as `model_record_crcs` writes it: by listed data file, each blob
    offset (a decimal string) with a CRC-32 (an int below 2**32)."""
    for name, crcs in records.items():
        if not isinstance(crcs, dict) or not all(
            key.isdecimal() and _is_kind(crc, int) and 0 <= crc < 1 << 32
            for key, crc in crcs.items()
        ):
            raise ManifestError(
                f"{source}: field 'model_records' holds for {cut_to(repr(name), 80)} other than"
                " blob offsets with CRC-32s"
            )


def _may_leave(name: str) -> bool:
    """Whether `check_relative_name` could refuse `name`: every name it refuses is empty,
    absolute, or holds `..` or NUL. A string test first, as a manifest may list hundreds of
    thousands of names, and parsing each into a Path was much of what `inspect` spent on one."""
    return not name or name.startswith("/") or ".." in name or "\x00" in name


def _check_lora_fields(fields: dict[str, Any], source: str) -> None:
    """A LoRA run's `lora` and `base_model`, as export reads them (`lora_fields`)."""
    from mfsdp_ckpt.format.lora_fields import BaseModelRecord, recorded_lora_settings

    if fields.get("lora") is not None:
        recorded_lora_settings(fields["lora"], source)
    if fields.get("base_model") is not None:
        BaseModelRecord.from_dict(fields["base_model"], source)


def _is_kind(value: Any, kind: type | tuple[type, ...]) -> bool:
    """`isinstance`, but a JSON true or false is no number: bool is an int to Python."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def read_manifest(path: str | os.PathLike) -> Manifest:
    """The manifest at `path`: a regular file in its step directory, at most
    MAX_MANIFEST_BYTES (a FIFO or a link to /dev/zero is refused, never opened)."""
    path = Path(path)
    if not os.path.lexists(path):
        raise ManifestError(f"{path}: manifest is missing")
    try:
        text = safe_files.read_text(path, MAX_MANIFEST_BYTES, root=path.parent)
    except CheckpointFileError as err:
        raise ManifestError(str(err)) from None
    return Manifest.from_json(text, source=str(path))
