"""`manifest.json`: what a step directory holds, written last so it marks the step complete.

It records every file with size and sha256 so that `validate --deep` can prove the bytes
are the ones that were written, plus enough context (world size, strategy, versions,
contents) to explain a checkpoint years later without the code that wrote it.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError, _check_relative_name

FORMAT_VERSION = 1
CONTENT_KINDS = ("model", "optimizer", "extra")
_HASH_BLOCK = 8 << 20
MAX_MANIFEST_BYTES = 64 << 20  # ~150 bytes per listed file: far past any real step


class ManifestError(MfsdpFailedError, ValueError):
    """manifest.json is missing a field, has a wrong type, or names an unsafe path."""


@dataclass(frozen=True)
class FileRecord:
    size: int
    sha256: str


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

    def to_json(self) -> str:
        data = asdict(self)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "manifest.json") -> Manifest:
        try:
            data = json.loads(text)
        except (
            ValueError,
            RecursionError,
        ) as err:  # bad JSON, a 5000-digit number, [[[[... nesting
            raise ManifestError(f"{source}: not valid JSON ({str(err)[:200]})") from None
        if not isinstance(data, dict):
            raise ManifestError(f"{source}: top level must be an object")
        return cls._from_dict(data, source)

    @classmethod
    def _from_dict(cls, data: dict, source: str) -> Manifest:
        def need(key: str, kind: type | tuple[type, ...]) -> Any:
            value = data.get(key)
            if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
                raise ManifestError(f"{source}: field {key!r} is missing or not {_kind_name(kind)}")
            return value

        version = need("format_version", int)
        if version > FORMAT_VERSION:
            raise ManifestError(
                f"{source}: format_version {version} is newer than this mfsdp reads "
                f"({FORMAT_VERSION})"
            )
        step, world_size = need("step", int), need("world_size", int)
        if step < 0 or world_size < 1:
            raise ManifestError(f"{source}: step {step} / world_size {world_size} out of range")
        contents = need("contents", list)
        unknown = [c for c in contents if c not in CONTENT_KINDS]
        if unknown:
            raise ManifestError(f"{source}: unknown contents {unknown}")
        files: dict[str, FileRecord] = {}
        for name, record in need("files", dict).items():
            try:
                _check_relative_name(name)
            except CheckpointFileError as err:
                raise ManifestError(f"{source}: {err}") from None
            if (
                not isinstance(record, dict)
                or not isinstance(record.get("size"), int)
                or isinstance(record.get("size"), bool)
                or record["size"] < 0
                or not isinstance(record.get("sha256"), str)
                or len(record["sha256"]) != 64
            ):
                raise ManifestError(f"{source}: file record for {name!r} needs size and sha256")
            files[name] = FileRecord(record["size"], record["sha256"])
        optional: dict[str, type | tuple[type, ...]] = {
            "model_family": (str, type(None)),
            "versions": dict,
            "created_at": str,
            "save_seconds": (int, float, type(None)),
            "info": dict,
            "base_model": (dict, type(None)),
            "lora": (dict, type(None)),
        }
        extras = {}
        for key, kind in optional.items():
            if key in data:
                if not isinstance(data[key], kind):
                    raise ManifestError(f"{source}: field {key!r} is not {_kind_name(kind)}")
                extras[key] = data[key]
        return cls(
            step=step,
            world_size=world_size,
            strategy=need("strategy", str),
            contents=contents,
            files=files,
            format_version=version,
            **extras,
        )


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


def sha256_file(path: str | os.PathLike, root: str | os.PathLike | None = None) -> str:
    """sha256 of a regular file (inside `root` when given); anything else is refused unread."""
    digest = hashlib.sha256()
    fd = safe_files.open_regular(path, root)
    with os.fdopen(fd, "rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def hash_files(
    root: str | os.PathLike, names: list[str], workers: int = 4
) -> dict[str, FileRecord]:
    """sha256 and size of each file under root, hashed in parallel (hashlib drops the GIL)."""
    root = Path(root)

    def record(name: str) -> tuple[str, FileRecord]:
        path = root / name
        return name, FileRecord(path.stat().st_size, sha256_file(path, root))

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return dict(pool.map(record, names))
