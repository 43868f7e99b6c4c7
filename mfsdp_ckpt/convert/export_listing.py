"""What a loader finds in an export, before any tensor is compared: its weight files, its
index, each file's header, and which file each tensor is read from.

`--verify` checks the export as transformers and import-hf read it. A sharded export
(several weight files, or one named as a shard, `model-00001-of-00004.safetensors`) loads
only through its index: without one neither loads it, and a tensor a shard holds that the
index does not list (or lists in another shard) is one the loader never reads where it
is, so each is a problem here, as a tensor the checkpoint does not make or one missing.

A weight file that cannot be read (missing, truncated, a bad header, a FIFO, a symlink)
is one line naming it as the export names it (never the hidden work dir it is verified
in, which is gone by the time the line is read) with the reason and how many of its
tensors were left uncompared: one line per file, never one per tensor, and first, since
the lines after it follow from it.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.format.run_steps import natural_order
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.safetensors_source import (
    SafetensorsError,
    SafetensorsSource,
    index_weight_map,
)
from mfsdp_ckpt.storage.safetensors_writer import INDEX_FILE, SINGLE_FILE

WEIGHTS_SUFFIX = ".safetensors"
# transformers' shard names (`model-00001-of-00004.safetensors`): one alone is still a shard
SHARD_NAME = re.compile(r"model.*-of-.*\.safetensors")


@dataclass
class ExportListing:
    """The export as a loader reads it: the weight files whose headers were read, the file
    each tensor is read from, and every problem found on the way, file-level lines first."""

    readable: dict[str, SafetensorsSource] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def read_from(self) -> dict[str, set[str]]:
        """Per readable file, the tensors a loader reads from it that its header holds (those
        to compare), found in one pass over `where` (an export may have thousands of files)."""
        compared: dict[str, set[str]] = {file: set() for file in self.readable}
        for name, file in self.where.items():
            if file in compared and name in self.readable[file].tensors:
                compared[file].add(name)
        return compared


def list_export(out: Path, expected: set[str]) -> ExportListing:
    """The listing of the export in `out`, checked against `expected` (the tensor names the
    checkpoint makes): the set of tensors a loader finds must be exactly that set."""
    listing = ExportListing()
    names = sorted(entry.name for entry in os.scandir(out) if entry.name.endswith(WEIGHTS_SUFFIX))
    index, index_problem = _read_index(out, names)
    files = sorted(set(index.values())) if index is not None else names or [SINGLE_FILE]
    unread: dict[str, str] = {}
    for file in files:
        try:
            listing.readable[file] = open_written(out, file)
        except (SafetensorsError, CheckpointFileError) as err:
            unread[file] = str(err)
    held = _held(listing.readable)
    if index is not None:
        listing.where = dict(index)
    else:
        listing.where = {name: holders[0] for name, holders in held.items()}
    missing = sorted(expected - set(listing.where) - set(held), key=natural_order)
    lines = [index_problem] if index_problem else []
    lines += _unread_lines(unread, index, missing)
    lines += [
        f"{name}: a weight file the index does not name" for name in names if name not in files
    ]
    lines += _misplaced(held, index, listing.readable) if index is not None else _in_several(held)
    if not (unread and index is None):  # else said, counted, in the unread files' lines
        lines += [f"{name}: missing from the export" for name in missing]
    lines += _not_the_checkpoints(listing, held, expected)
    listing.problems = lines
    return listing


def open_written(out: Path, file: str) -> SafetensorsSource:
    """`file`'s header, read as import reads it. A file missing or a symlink is refused
    before it is opened: the export writes every file itself, so a link (wherever it leads)
    is not what it wrote, and the line says where it leads."""
    path = out / file
    if os.path.islink(path):
        raise CheckpointFileError(_link_line(file, path))
    if not os.path.lexists(path):
        raise CheckpointFileError(f"{file}: missing")
    try:
        return SafetensorsSource(out, only=file)
    except SafetensorsError as err:
        reason = named_in_export(str(err), out)
        for prefix in (f"{file}: ", f"{file} "):  # the file is named once, before it
            reason = reason.removeprefix(prefix)
        raise SafetensorsError(f"{file}: unreadable ({reason})") from None


def _link_line(file: str, path: Path) -> str:
    return f"{file}: a symlink to {os.readlink(path)}, not a file the export wrote"


def named_in_export(text: str, out: Path) -> str:
    """`text` with the export's own dir left out of the paths it names: `out` is the hidden
    work dir of an export not yet published, gone (removed, as the export failed) by the
    time the line is read; the file's name within the export is what the user can find."""
    return text.replace(f"{out}{os.sep}", "").replace(str(out), "the export")


def _read_index(out: Path, names: list[str]) -> tuple[dict[str, str] | None, str | None]:
    """The index's weight map (None when there is none, or it cannot be read) and the line
    saying what is wrong with it: unreadable, or missing from a sharded export."""
    path = out / INDEX_FILE
    if os.path.islink(path):
        return None, _link_line(INDEX_FILE, path)
    if not os.path.lexists(path):
        if len(names) > 1 or any(SHARD_NAME.fullmatch(name) for name in names):
            files = f"{len(names)} weight file(s): {first_of(names, 2)}"
            return None, f"{INDEX_FILE}: missing; a sharded export loads only through it ({files})"
        return None, None
    try:
        return index_weight_map(out), None
    except SafetensorsError as err:
        return None, named_in_export(str(err), out)


def _held(readable: dict[str, SafetensorsSource]) -> dict[str, list[str]]:
    """Each tensor the readable files' headers hold, with the files holding it."""
    held: dict[str, list[str]] = {}
    for file, source in readable.items():
        for name in source.tensors:
            held.setdefault(name, []).append(file)
    return held


def _unread_lines(
    unread: dict[str, str], index: dict[str, str] | None, missing: list[str]
) -> list[str]:
    """One line per file that could not be read, with the count of tensors it leaves
    uncompared: those the index lists there; without an index, those found in no readable
    file (one such file: they are its own; several: counted once, after them)."""
    if index is not None:
        counts: Mapping[str, int] = Counter(index.values())
    else:
        counts = {file: len(missing) for file in unread} if len(unread) == 1 else {}
    lines = [_uncompared(reason, counts.get(file, 0)) for file, reason in unread.items()]
    if index is None and len(unread) > 1 and missing:
        lines.append(
            f"{len(missing)} tensor(s) in none of the readable files, not compared:"
            f" {first_of(missing, 3)}"
        )
    return lines


def _uncompared(reason: str, count: int) -> str:
    return f"{reason}; its {count} tensor(s) not compared" if count else reason


def _misplaced(
    held: dict[str, list[str]], index: dict[str, str], readable: dict[str, SafetensorsSource]
) -> list[str]:
    """Tensors not where the index says: one a file holds that the index lists elsewhere or
    not at all (naming both), and one the index lists in a readable file that holds it
    nowhere."""
    lines = []
    for name in sorted(held, key=natural_order):
        listed = index.get(name)
        for file in held[name]:
            if file != listed:
                said = f", where the index lists {listed}" if listed else " but not in the index"
                lines.append(f"{name}: in {file}{said}")
    lines += [
        f"{name}: not in {file}, where the index lists it"
        for name, file in sorted(index.items(), key=lambda item: natural_order(item[0]))
        if file in readable and name not in held
    ]
    return lines


def _in_several(held: dict[str, list[str]]) -> list[str]:
    """Without an index, the tensors held by more than one file: one line per set of files
    (a file copied whole holds all of them again)."""
    together: dict[tuple[str, ...], list[str]] = {}
    for name in sorted(held, key=natural_order):
        if len(held[name]) > 1:
            together.setdefault(tuple(held[name]), []).append(name)
    return [
        f"{names[0]}: in both {' and '.join(files)}"
        if len(names) == 1
        else f"{len(names)} tensor(s) in each of {' and '.join(files)}: {first_of(names, 2)}"
        for files, names in together.items()
    ]


def _not_the_checkpoints(
    listing: ExportListing, held: dict[str, list[str]], expected: set[str]
) -> list[str]:
    """The tensors a loader reads that the checkpoint does not make; one the index lists in
    a readable file that does not hold it is said by `_misplaced` alone."""
    return [
        f"{name}: in {file} but not in the checkpoint"
        for name, file in sorted(listing.where.items(), key=lambda item: natural_order(item[0]))
        if name not in expected and (name in held or file not in listing.readable)
    ]
