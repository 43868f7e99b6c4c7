"""What `mfsdp demo` wrote into its directory, recorded there, so that a later demo deletes
that directory only while it holds exactly what the demo wrote.

A demo starts over by deleting its previous output. Checking the names at the top of the
directory alone deleted what a user had added below them: the steps of `mfsdp train sft
--config OUT/sft/config.yaml` that continued the demo's run, its `config.until_step_N.yaml`.
So the demo lists every folder and file it wrote (each file with its size and digest) in its
marker file when it ends, done, failed or stopped by Ctrl-C; a later demo deletes the
directory only when what is there is on that list, every file with the bytes recorded
(an entry of the list that is gone is no reason to keep the rest). Anything else is named
and nothing is deleted. A demo killed before it wrote its list
(`kill -9`, a power cut) leaves a marker without one: its directory is refused too, since
nothing then says which of its files are the demo's.

One thing the demo did not write is its own all the same: an export of its run into the
demo's export dir (`hf`) where it never wrote one, which the line of a demo stopped after
training suggests (`mfsdp ckpt export-hf OUT/sft --out OUT/hf`); refused, it blocked the
start over that the same line suggests.

The list holds only what the demo writes: its folders (`WRITES`), all below them, and
their lock files. It listed whatever `OUT` held as it ended, on the belief that `OUT` had
been new or emptied: where that failed (`--out P/new/..` passed as new for the non-empty
`P`), a user's files were listed as the demo's, and the next demo deleted them. Anything
else at the top of `OUT` is left off, so a later demo finds it and keeps it.

Listing and hashing are bounded: a directory with more entries than any demo writes is
refused before anything is hashed, and only files listed with the same size are hashed.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.format.file_hash import FileRecord, FileRecordError, hash_file
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.lock_holder import file_lock_holder
from mfsdp_ckpt.storage.out_lock import LOCK_SUFFIX, hidden_name
from mfsdp_ckpt.storage.unique_json import parse_json
from trainer.run_files import replacing

MARKER = ".mfsdp-demo"  # written first into every demo dir; holds the list once the demo ends
# What a demo dir holds: GSM8K-format rows, their tables, the initial model, the run, and the
# export of the run (which a start over takes for the demo's own where it wrote none)
RAW_DIR, DATA_DIR, INIT_DIR, RUN_DIR, EXPORT_DIR = "gsm8k_format", "data", "init_model", "sft", "hf"
WRITES = (RAW_DIR, DATA_DIR, INIT_DIR, RUN_DIR, EXPORT_DIR)
# the top-level names the list may hold: those and the lock file each is written under
_OWN = frozenset(WRITES) | {hidden_name(name, LOCK_SUFFIX) for name in WRITES}
DEMO_DIR = "runs/demo"  # the demo's --out unless given; the examples read its data there
MAX_ENTRIES = 10_000  # a demo writes under a hundred
MAX_DEPTH = 16  # a demo's deepest file is 5 levels down
MAX_MARKER_BYTES = 4 << 20
MAX_EXPORT_FILES = 1_000  # an export's shards, index, config and tokenizer files
# the list's object, its `dirs` and `files`, and one object per file: no more in a marker
MAX_MARKER_CONTAINERS = MAX_ENTRIES + 3
_WRITER = "mfsdp demo"
_SHOWN = 3


@dataclass(frozen=True)
class Written:
    """The demo's list: the folders it made and its files' records, by path under its dir."""

    dirs: frozenset[str]
    files: dict[str, FileRecord]

    def to_json(self) -> dict[str, Any]:
        return {
            "written_by": _WRITER,
            "dirs": sorted(self.dirs),
            "files": {name: record.to_json() for name, record in sorted(self.files.items())},
        }


def start(out: Path) -> None:
    """Mark `out` (new or emptied) as a demo's dir whose list is still to be written."""
    _write(out, {"written_by": _WRITER, "dirs": None, "files": None})


def record(out: Path) -> None:
    """Write the list of what the demo that holds `out`'s lock wrote there: what is under
    its own names (`WRITES`) now; anything else in `out` is left off the list."""
    dirs, files, extra = _walk(out, None)
    if extra:  # more entries than any demo writes: someone else's; no list, so never deleted
        _write(out, {"written_by": _WRITER, "dirs": None, "files": None})
        return
    records = {name: hash_file(out / name, out, within=str(out)) for name in files}
    _write(out, Written(frozenset(dirs), records).to_json())


def refusal(out: Path) -> Exception | None:
    """Why the non-empty `out` may not be deleted to start the demo over (a usage error
    naming what is not the demo's, or a busy error naming the training run using a dir in
    it), or None when it holds exactly what a previous demo wrote, and maybe an export of
    its run into EXPORT_DIR where it wrote none."""
    written = _read(out)
    if isinstance(written, str):
        return MfsdpUsageError(written)
    _, files, extra = _walk(out, written)
    if EXPORT_DIR in extra and _holds_only_an_export(out / EXPORT_DIR):
        extra.remove(EXPORT_DIR)
    busy = _training_run(out, extra)
    if busy is not None:
        return busy
    if extra:
        return MfsdpUsageError(
            f"{out}: a previous demo's output that also holds {first_of(extra, _SHOWN)}, which the"
            " demo did not write and will not delete; move it elsewhere, or choose a new --out"
        )
    changed = _changed(out, files, written)
    if changed is not None:
        return MfsdpUsageError(
            f"{out}: a previous demo's output in which {changed}; the demo will not delete it:"
            " move it elsewhere, or choose a new --out"
        )
    return None


def _read(out: Path) -> Written | str:
    """The list in `out`'s marker, or why there is none to trust (the refusal's words). The
    marker is parsed by the bounded JSON reader (`parse_json`: no more objects and arrays
    than a demo's list holds, counted before it is parsed, no deep nesting, each key once):
    4 MB of `[{},...]` took memory many times its size in Python's json, and one nested
    too deep raised RecursionError; either is a marker without a list to trust."""
    marker = out / MARKER
    if not os.path.lexists(marker):
        return (
            f"{out}: directory is not empty and is not a previous demo's output (no {MARKER});"
            " choose a new --out"
        )
    unlisted = (
        f"{out}: a previous demo's output without the list of what it wrote (a demo killed"
        " before it ended, or one of an older mfsdp), so nothing in it is deleted; remove it"
        " yourself, or choose a new --out"
    )
    try:
        text = safe_files.read_text(marker, MAX_MARKER_BYTES, out)
        data = parse_json(text, str(marker), ValueError, MAX_MARKER_CONTAINERS)
        dirs, files = data["dirs"], data["files"]
        if data.get("written_by") != _WRITER or dirs is None or files is None:
            return unlisted
        # a name outside the demo's own is no demo's, whatever a list of an older mfsdp says
        return Written(
            frozenset(str(name) for name in dirs if _own(str(name))),
            {
                str(name): FileRecord.from_json(entry)
                for name, entry in files.items()
                if _own(str(name))
            },
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, FileRecordError):
        return unlisted


def _own(name: str) -> bool:
    """Whether `name` (a path under a demo dir) lies under one of the demo's own names."""
    return name.split("/", 1)[0] in _OWN


def _walk(out: Path, written: Written | None) -> tuple[list[str], list[str], list[str]]:
    """(folders, files, entries not on `written`'s list) under `out`, by path under it,
    the marker aside; a folder not on the list is not entered. Without a list (`record`
    making one), only what lies under the demo's own names (`_own`) is walked, the rest
    skipped. Symlinks and special files are never followed: the demo writes none, so they
    are always extra. Past MAX_ENTRIES or MAX_DEPTH, the rest counts as one extra entry."""
    dirs: list[str] = []
    files: list[str] = []
    extra: list[str] = []
    pending = [(out, "", 0)]
    seen = 0
    while pending:
        folder, prefix, depth = pending.pop()
        with os.scandir(folder) as entries:
            children = sorted(entries, key=lambda entry: entry.name)
        for entry in children:
            name = f"{prefix}{entry.name}"
            if name == MARKER or (written is None and not _own(name)):
                continue
            seen += 1
            if seen > MAX_ENTRIES or depth >= MAX_DEPTH:
                return dirs, files, [*extra, f"{name} (and more than a demo writes)"]
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode) and (written is None or name in written.dirs):
                dirs.append(name)
                pending.append((Path(entry.path), f"{name}/", depth + 1))
            elif stat.S_ISREG(mode) and (written is None or name in written.files):
                files.append(name)
            else:
                extra.append(name)
    return dirs, files, sorted(extra)


def _holds_only_an_export(folder: Path) -> bool:
    """Whether `folder` is a directory (no link) holding what `mfsdp ckpt export-hf` writes
    and nothing else: a few regular files, `config.json` and safetensors among them."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    with os.scandir(folder) as entries:
        found = list(itertools.islice(entries, MAX_EXPORT_FILES + 1))
    if len(found) > MAX_EXPORT_FILES:
        return False
    if not all(stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode) for entry in found):
        return False
    names = {entry.name for entry in found}
    return "config.json" in names and any(name.endswith(".safetensors") for name in names)


def _training_run(out: Path, extra: list[str]) -> Exception | None:
    """A busy error (exit 1) when one of the `extra` entries is the lock of a training run
    that a live process holds (`mfsdp train sft --config OUT/sft/config.yaml` continuing
    the demo's run leaves `.sft.out-lock` beside `sft` while it trains)."""
    for name in extra:
        folder, _, base = name.rpartition("/")
        if not (base.startswith(".") and base.endswith(LOCK_SUFFIX)):
            continue
        pid = file_lock_holder(out / name)
        if pid is None:
            continue
        run = out / folder / base[1 : -len(LOCK_SUFFIX)]
        who = f"pid {pid}" if pid else "a process"
        return MfsdpFailedError(
            f"{out}: a training run ({who}) is using {run}; the demo will not delete it:"
            " wait for the run to end, or choose a new --out"
        )
    return None


def _changed(out: Path, files: list[str], written: Written) -> str | None:
    """How a listed file differs from its record (the refusal's words), or None. Sizes are
    compared first, so only files the demo could have written are hashed."""
    for name in files:
        expected = written.files[name]
        size = os.lstat(out / name).st_size
        if size != expected.size:
            return f"{name} has {size} bytes, {expected.size} when the demo wrote it"
    for name in files:
        expected = written.files[name]
        if hash_file(out / name, out, expected.algorithm, within=str(out)) != expected:
            return f"{name} has other bytes than the demo wrote ({expected.algorithm} differs)"
    return None


def _write(out: Path, content: dict[str, Any]) -> None:
    with replacing(out / MARKER, "write the demo's list of what it wrote") as handle:
        handle.write(json.dumps(content, indent=1).encode() + b"\n")


__all__ = [
    "DATA_DIR",
    "EXPORT_DIR",
    "INIT_DIR",
    "MARKER",
    "RAW_DIR",
    "RUN_DIR",
    "WRITES",
    "record",
    "refusal",
    "start",
]
