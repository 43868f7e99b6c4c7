"""Checks of a checkpoint's bytes as stored: the files its metadata and manifest name, each
tensor's chunks and their storage entries, and (deep) the file digests, every tensor's
values and every non-tensor blob as a torch.save container.

Nothing here interprets what the tensors mean; a truncated file, a chunk without bytes or
a blob whose CRC fails is damage whatever the writer (mfsdp, verl, Megatron-LM).
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from mfsdp_ckpt.check import manifest_coverage
from mfsdp_ckpt.check.blob_runs import SMALL_BLOB_BYTES, small_blobs
from mfsdp_ckpt.check.object_archives import ArchiveVerdicts, archive_checked
from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.check.read_ahead import reading_ahead
from mfsdp_ckpt.check.report import ERROR, WARNING, Progress, ValidationReport
from mfsdp_ckpt.check.tensor_crc import PayloadCrc, check_blob_crcs
from mfsdp_ckpt.format import dir_entries, file_walk, layout
from mfsdp_ckpt.format.file_hash import ByteProgress, HashedBytes, hash_file
from mfsdp_ckpt.format.finite import count_nan_tensor, count_nonfinite_tensor
from mfsdp_ckpt.format.manifest import Manifest
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.chunk_checks import MAX_LISTED_PROBLEMS, chunk_backing_problem
from mfsdp_ckpt.storage.confined_stat import LeadsOutError
from mfsdp_ckpt.storage.piece_reads import piece_reader
from mfsdp_ckpt.storage.reader import (
    CheckpointFormatError,
    CheckpointReader,
    ObjectEntry,
    TensorEntry,
    unclaimed_storage_entries,
)

if TYPE_CHECKING:
    from pathlib import Path

    import torch

# The bytes of a stored chunk `tensor_pieces` reads at a time: what validate --deep holds of
# a tensor of any size (and a chunk decoded whole: a small one, or one not raw bytes)
WINDOW_BYTES = 4 << 20

HASH_MISMATCH = "{} differs from the manifest (bytes changed after save)"

# A further check of a tensor's values, given its key and the values as flat pieces (each
# valid until the next is taken; it may stop early): what is wrong with them, in one
# message, or None. `check_values` runs it on the pieces it reads for its own count.
TensorCheck = Callable[[str, "Iterator[torch.Tensor]"], "str | None"]


def check_files(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    manifest: Manifest | None,
    report: ValidationReport,
) -> None:
    """Check the files a checkpoint is made of, by stat alone (the digests are `deep`'s):
    those `.metadata` names, and for a step with a manifest every file it lists, by size, and
    every file it does not list (an error where our save always lists it:
    `manifest_coverage`). A size is what a cut-short copy or a full disk changes, and
    a stat costs nothing next to a hash. A listed file is stat'ed inside the step dir, so a
    link out of it is refused, not followed. A checkpoint without a manifest (another
    tool's, a bare dist_ckpt) has only `.metadata` to go by."""
    needed = check_data_files(reader, report)
    if manifest is None or paths.step_dir is None:
        report.files = len(needed) + 1
        return
    report.files = len(manifest.files)
    # a file `.metadata` needs, already found missing, cut short or linked out, is one
    # fault: said once, not again as the manifest's (a set: 100,000 listed files stay linear)
    reported = {f.where for f in report.findings if f.severity == ERROR}
    for name, record in sorted(manifest.files.items()):
        file = paths.step_dir / name
        if str(file) in reported:
            continue
        try:
            found = dir_entries.stat_inside(file, paths.step_dir)
        except LeadsOutError as err:  # refused unread: its size is not told
            report.add_error(file, err)
            continue
        if found is None:
            report.add(ERROR, file, "listed in the manifest but missing")
        elif not stat.S_ISREG(found.st_mode):  # a FIFO or a directory is there, not missing
            report.add(ERROR, file, f"{safe_files.kind_name(found.st_mode)}, not a regular file")
        elif found.st_size != record.size:
            report.add(ERROR, file, f"has {found.st_size} bytes, manifest says {record.size}")
    listed = set(manifest.files)
    try:
        present = file_walk.list_files(paths.step_dir)
    except layout.CheckpointPathError as err:
        report.add_error(paths.step_dir, err)
        present = []
    others = [name for name in present if name != layout.MANIFEST_FILE]
    rewritten, unknown = manifest_coverage.unlisted(others, listed)
    for relative in rewritten:  # at most the few `ALWAYS_WRITTEN`
        report.add(ERROR, paths.step_dir / relative, manifest_coverage.UNLISTED)
    for relative in unknown[:MAX_LISTED_PROBLEMS]:
        report.add(WARNING, paths.step_dir / relative, "not listed in the manifest (unknown file)")
    left = len(unknown) - MAX_LISTED_PROBLEMS  # 20,000 junk files are one finding, not 20,000
    _count_the_rest(report, WARNING, paths.step_dir, left, "files not listed in the manifest")
    for name in needed:
        if f"{layout.DIST_CKPT_DIR}/{name}" not in listed:
            report.add(
                ERROR, paths.dist_ckpt / name, "referenced by .metadata but not in the manifest"
            )


def check_data_files(reader: CheckpointReader, report: ValidationReport) -> dict[str, int]:
    """Each data file `.metadata` names is there and holds the bytes it needs; returns them
    ({file: bytes needed})."""
    needed = reader.files()
    for name, min_size in sorted(needed.items()):
        size = _safe_size(reader, name, report)
        if size is not None and size < min_size:
            report.add(
                ERROR,
                reader.root / name,
                f"has {size} bytes, metadata needs {min_size} (truncated)",
            )
    return needed


def _safe_size(reader: CheckpointReader, name: str, report: ValidationReport) -> int | None:
    try:
        size = reader.store.size(name)
    except CheckpointFileError as err:
        report.add_error(reader.root / name, err)
        return None
    if size is None:
        report.add(ERROR, reader.root / name, "referenced by .metadata but missing")
    return size


def check_chunks(reader: CheckpointReader, report: ValidationReport) -> None:
    """Each tensor's chunks tile it, and each has a storage entry: the chunks without one
    (what a save that lost a file's writes leaves) are listed up to MAX_LISTED_PROBLEMS in
    all, then counted, as every other per-chunk finding is."""
    unwritten = 0
    for entry in reader.tensors.values():
        where = f"{reader.root / layout.DCP_METADATA_FILE} [{entry.name}]"
        for problem in reader.coverage_problems(entry):
            report.add(ERROR, where, problem)
        for chunk in entry.chunks:
            if chunk.numel and chunk.file is None:
                unwritten += 1
                if unwritten <= MAX_LISTED_PROBLEMS:
                    report.add(
                        ERROR,
                        where,
                        f"chunk at {chunk.offsets} has no storage entry (its bytes were never"
                        " written)",
                    )
    metadata_file = reader.root / layout.DCP_METADATA_FILE
    left = unwritten - MAX_LISTED_PROBLEMS
    _count_the_rest(report, ERROR, metadata_file, left, "chunks without a storage entry")


def check_storage_entries(reader: CheckpointReader, report: ValidationReport) -> None:
    """An error for each storage entry no state-dict key reads (`unclaimed_storage_entries`):
    DCP writes both tables from one plan, so such an entry is an edited or damaged
    `.metadata`, which no reader would notice, since each looks up only the entries its keys
    name. The first MAX_LISTED_PROBLEMS are listed, the rest counted."""
    problems = unclaimed_storage_entries(reader.metadata, reader.tensors, reader.objects)
    for key, message in problems[:MAX_LISTED_PROBLEMS]:
        report.add(ERROR, f"{reader.root / layout.DCP_METADATA_FILE} [{key}]", message)
    metadata_file = reader.root / layout.DCP_METADATA_FILE
    left = len(problems) - MAX_LISTED_PROBLEMS
    _count_the_rest(report, ERROR, metadata_file, left, "storage entries no key reads")


def _count_the_rest(
    report: ValidationReport, severity: str, where: str | Path, left: int, what: str
) -> None:
    """After the first MAX_LISTED_PROBLEMS findings of a kind, one finding `(+N more WHAT)`
    for the `left` others: a hostile checkpoint's 20,000 problems are counted, not listed,
    in the spelling of `first_of`."""
    if left > 0:
        report.add(severity, where, f"(+{left} more {what})")


def check_backing(reader: CheckpointReader, report: ValidationReport) -> None:
    """Each chunk's blob must be able to hold the bytes its metadata declares (no file is
    read: a tensor claiming 1 TiB over a 1 KB blob is caught by the cheap checks)."""
    for entry in reader.tensors.values():
        for chunk in entry.chunks:
            problem = chunk_backing_problem(entry, chunk)
            if problem:
                report.add(
                    ERROR, f"{reader.root / layout.DCP_METADATA_FILE} [{entry.name}]", problem
                )
                break


def check_hashes(
    paths: layout.CheckpointPaths,
    manifest: Manifest,
    report: ValidationReport,
    progress: ByteProgress | None,
) -> None:
    """The digest of every file the manifest records whose size is right (a wrong size is
    check_files' finding), reported to `progress` as bytes: gigabytes of a large step. The
    verdict names the algorithms checked (`hash_algorithms`) only where the manifest lists
    every file our save does: else the digests vouch for nothing, which its error says."""
    step_dir = paths.step_dir
    assert step_dir is not None  # a manifest is read from a step dir (`paths.manifest`)
    if not manifest_coverage.found_rewritten(report):
        report.hash_algorithms = sorted({record.algorithm for record in manifest.files.values()})
    sized = {}
    for name, record in sorted(manifest.files.items()):
        try:
            found = dir_entries.stat_inside(step_dir / name, step_dir)
        except LeadsOutError:  # a link out of the step: check_files' finding
            continue
        if found is not None and stat.S_ISREG(found.st_mode) and found.st_size == record.size:
            sized[name] = record
    hashed = HashedBytes(sum(record.size for record in sized.values()), progress)
    for name, record in sized.items():
        file = step_dir / name
        try:
            if hash_file(file, step_dir, record.algorithm, on_block=hashed.add) != record:
                report.add(ERROR, file, HASH_MISMATCH.format(record.algorithm))
        except CheckpointFileError as err:  # a link out of the step or a special file: never read
            report.add_error(file, err)


def check_objects(
    reader: CheckpointReader, report: ValidationReport, read: ArchiveVerdicts | None = None
) -> None:
    """Every non-tensor blob (args, iteration, RNG state, scheduler) is a whole torch.save
    archive whose stored members match their CRCs (`object_archives`). `read`: the
    verdicts of the blobs a check before read already (`check_object_pickles`), whose bytes
    are not read again; the others are read here, small ones a run of neighbours at a time
    (`blob_runs`)."""
    lost = files_not_readable(reader)
    checked = [
        entry
        for entry in reader.objects.values()
        if archive_checked(entry) and entry.file not in lost
    ]
    verdicts = read if read is not None else ArchiveVerdicts()
    unjudged = [entry for entry in checked if entry.name not in verdicts.found]
    for entry, raw in small_blobs(reader, unjudged):
        verdicts.add(entry, raw)
    unread: dict[str, list[str]] = {}
    for name, entry in sorted(reader.objects.items()):
        where = f"[{name}]"
        if entry.file in lost:
            unread.setdefault(entry.file, []).append(name)
            continue
        if entry.file is None:
            report.add(
                ERROR, where, "non-tensor entry has no storage entry (its bytes were never written)"
            )
            continue
        if not archive_checked(entry):
            continue
        if name not in verdicts.found:  # too large to read with its neighbours
            verdicts.add(entry, _read_whole(reader, entry))
        problem = verdicts.found[name]
        if isinstance(problem, CheckpointFileError):
            report.add_error(where, problem, named=reader.root / entry.file)
        elif problem is not None:
            report.add(problem[0], where, problem[1])
    _report_unread(unread, lost, report)


def _read_whole(reader: CheckpointReader, entry: ObjectEntry) -> bytes | CheckpointFileError:
    """The bytes of a blob too large to read with its neighbours, or the error reading them."""
    try:
        return reader.store.read_range(entry.file or "", entry.file_offset, entry.length)
    except CheckpointFileError as err:
        return err


def check_values(
    reader: CheckpointReader,
    report: ValidationReport,
    progress: Progress | None,
    also: TensorCheck | None = None,
    *,
    crcs: bool = True,
) -> None:
    """Every tensor read once, a bounded piece at a time (`tensor_pieces`), for NaN/Inf,
    for what `also` looks for (the optimizer's value checks of a checkpoint without a
    manifest) and, where `crcs`, against the CRC written for its bytes (set where no
    manifest digest vouches for them: with one, a changed byte is said once, by the
    digest): on a checkpoint of hundreds of gigabytes a second read of any tensor costs
    as much as the first. `progress` is told the bytes read of all (done, total) as each
    piece is checked: one tensor of gigabytes, or of 200,000 chunks, is minutes of
    reading."""
    entries = list(reader.tensors.values())
    lost = files_not_readable(reader)
    unread: dict[str, list[str]] = {}  # a data file reported lost -> the tensors in it
    chunks = [(c.file, c.file_offset, c.length) for e in entries for c in e.chunks if c.file]
    counted = _BytesDone(sum(e.nbytes for e in entries), progress)
    with reading_ahead(reader, chunks):  # thousands of small tensors: a run at a time
        for entry in entries:
            gone = next((c.file for c in entry.chunks if c.file in lost), None)
            if gone is not None:  # said once for its file, not once per tensor
                unread.setdefault(gone, []).append(entry.name)
            elif not reader.coverage_problems(entry):
                _check_tensor(reader, entry, report, also, counted, crcs)
            counted.tensor_done(entry.nbytes)
    _report_unread(unread, lost, report)


class _BytesDone:
    """Bytes of tensor values checked so far, told to `progress` as each piece is; a tensor
    skipped (its file lost) or cut short by an error counts whole as it ends."""

    def __init__(self, total: int, progress: Progress | None):
        self.total, self.progress, self.done, self.in_tensor = total, progress, 0, 0

    def piece(self, nbytes: int) -> None:
        self.in_tensor += nbytes
        if self.progress is not None:
            self.progress(self.done + self.in_tensor, self.total)

    def tensor_done(self, nbytes: int) -> None:
        self.done, self.in_tensor = self.done + nbytes, 0
        if self.progress is not None:
            self.progress(self.done, self.total)


def _check_tensor(
    reader: CheckpointReader,
    entry: TensorEntry,
    report: ValidationReport,
    also: TensorCheck | None,
    counted: _BytesDone,
    crcs: bool,
) -> None:
    """One tensor read a piece at a time (`tensor_pieces`) and checked (`check_values`):
    read whole, a 2 GiB tensor held 2.5 GiB, and the largest tensor set the memory the
    check needed. Its NaN/Inf are counted on each piece as `also` (or, without it, this
    loop) takes it, so the pieces are read once for both."""
    where = f"[{entry.name}]"
    nans = nonfinite = 0

    def scanned() -> Iterator[torch.Tensor]:
        nonlocal nans, nonfinite
        for piece in tensor_pieces(reader, entry, crcs=crcs):
            found = count_nonfinite_tensor(piece)
            if found:
                nonfinite, nans = nonfinite + found, nans + count_nan_tensor(piece)
            yield piece
            counted.piece(piece.numel() * piece.element_size())

    pieces = scanned()
    try:
        problem = also(entry.name, pieces) if also is not None else None
        for _ in pieces:  # what `also` left unread (it stops at a first finding)
            pass
    except (CheckpointFormatError, CheckpointFileError) as err:
        report.add(ERROR, where, str(err))
        return
    if nonfinite:
        report.add(ERROR, where, f"{nans} NaN and {nonfinite - nans} Inf values")
    if problem is not None:
        report.add(ERROR, where, problem)


def tensor_pieces(
    reader: CheckpointReader, entry: TensorEntry, *, crcs: bool = True
) -> Iterator[torch.Tensor]:
    """`entry`'s values as flat pieces of a bounded size, in storage order (not the
    tensor's): a stored chunk of raw bytes a window at a time (`piece_reads`, as export
    --verify reads its source), into one buffer reused for every window (so a piece is
    valid only until the next is asked for); a small chunk, or one whose blob is not raw
    bytes (compressed, another layout), decoded whole (one chunk, never the tensor). Each
    chunk's bytes are checked against the CRC written for them (`tensor_crc`) where `crcs`,
    the raw ones as the windows pass, once the last is read.
    CheckpointFormatError/CheckpointFileError as reading the whole tensor raises them, or
    "fails its CRC"."""
    import torch

    reader.check_readable(entry)
    size = entry.dtype.itemsize
    buffer: torch.Tensor | None = None
    for chunk in entry.chunks:
        if not chunk.numel:
            continue
        where = f"{reader.root / (chunk.file or '?')} [{entry.name}]"
        payload = None
        if chunk.length > SMALL_BLOB_BYTES:  # smaller: served from its run (`reading_ahead`)
            payload = reader.raw_payload(entry, chunk)
        if payload is None or chunk.file is None:
            if crcs:
                check_blob_crcs(reader, chunk, where)
            yield reader.read_chunk(entry, chunk).reshape(-1)
            continue
        offset = payload.offset
        crc = PayloadCrc(payload if crcs else payload._replace(crc=None), where)
        elements = min(chunk.numel, max(1, WINDOW_BYTES // size))
        if buffer is None or buffer.numel() < elements * size:
            buffer = torch.empty(elements * size, dtype=torch.uint8)
        with piece_reader(reader, chunk.file, offset + chunk.numel * size) as fill:
            for first in range(0, chunk.numel, elements):
                raw = buffer[: min(elements, chunk.numel - first) * size]
                fill(buffer=raw.numpy().data, offset=offset + first * size)
                crc.add(raw.numpy().data)
                yield raw.view(entry.dtype.torch)
        crc.check()


def files_not_readable(reader: CheckpointReader) -> dict[str, str]:
    """The data files the metadata names that are absent, empty where bytes are stored in
    them (cut to 0 bytes), or cannot be read (a permission denied), each with which: the
    file checks report each once, so the deep reads skip what lies in them (one line per
    tensor repeated that finding). One byte of each is read."""
    stored = [(c.file, c.length) for e in reader.tensors.values() for c in e.chunks if c.file]
    stored += [(e.file, e.length) for e in reader.objects.values() if e.file]
    holding = {file for file, length in stored if length}
    lost: dict[str, str] = {}
    for file in {file for file, _ in stored}:
        try:
            size = reader.store.size(file)
            if size is None:
                lost[file] = "missing"
            elif size:
                reader.store.read_range(file, 0, 1)
            elif file in holding:
                lost[file] = "empty (0 bytes)"
        except CheckpointFileError:  # a link out, a FIFO, unreadable: reported there
            lost[file] = "unreadable"
    return lost


def _report_unread(
    unread: dict[str, list[str]], lost: dict[str, str], report: ValidationReport
) -> None:
    for file, names in unread.items():
        named = first_of([f"[{name}]" for name in names], 1)
        report.add(ERROR, named, f"not read: their data file {file} is {lost[file]}")
