"""`mfsdp ckpt validate`: every check a checkpoint must pass before anyone trusts it.

Each check appends `Finding`s naming the file or tensor and what is wrong; nothing here
raises for a bad checkpoint (a missing path is the caller's usage error), only for one
removed while it was read (`CheckpointRemovedError`: its findings would say nothing of
it). The cheap checks (metadata, files, chunk coverage, optimizer/model/config agreement,
tracker) always run (bytes shared between entries, but for a tied head's alias, are
refused as the metadata is read: `shared_bytes`); `deep=True` adds each file's digest
against the manifest (the algorithm its record names: xxh3_128, or sha256 in older
manifests) and reading every tensor (NaN/Inf counts).

Checkpoints verl and Megatron-LM write have no manifest: every check that needs none
still runs (coverage, each chunk inside its file, file sizes, values, shapes against the
HF config), the report says that hashes were not checked, and `strict` refuses them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

from mfsdp_ckpt.check.printable import printable
from mfsdp_ckpt.check.trainer_step import trainer_step_problem
from mfsdp_ckpt.convert import tied_head
from mfsdp_ckpt.convert.megatron_lora import stored_adapter_summary
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format import layout, optimizer_states, state_keys
from mfsdp_ckpt.format.dcp_metadata import UnsafeMetadataError
from mfsdp_ckpt.format.file_hash import ByteProgress, HashedBytes, hash_file, rehash_like
from mfsdp_ckpt.format.finite import count_nan_tensor, count_nonfinite_tensor
from mfsdp_ckpt.format.hf_trainer import OPTIMIZER_ENTRY
from mfsdp_ckpt.format.manifest import Manifest, ManifestError, read_manifest
from mfsdp_ckpt.lora import check_base_model
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import (
    MAX_LISTED_PROBLEMS,
    CheckpointFormatError,
    CheckpointReader,
    TensorEntry,
    chunk_backing_problem,
    unclaimed_storage_entries,
)

ERROR, WARNING = "error", "warning"
STRICT_NEEDS_MANIFEST = "no manifest.json: --strict requires one (file hashes cannot be checked)"
_HASH_MISMATCH = "{} differs from the manifest (bytes changed after save)"
NO_HF_CONFIG = "no Hugging Face config: weight shapes not checked (pass --hf-config DIR)"

Progress = Callable[[int, int], None]  # (done, total) over tensors / bytes


@dataclass(frozen=True)
class Finding:
    severity: str
    where: str
    message: str

    def __str__(self) -> str:
        """One terminal line, whatever names from the checkpoint it quotes."""
        return printable(f"{self.severity}: {self.where}: {self.message}")


@dataclass
class ValidationReport:
    path: str
    checkpoint: str | None = None
    step: int | None = None
    findings: list[Finding] = field(default_factory=list)
    tensors: int = 0
    tensor_bytes: int = 0
    files: int = 0
    deep: bool = False
    layout: str | None = None
    role: str | None = None
    has_manifest: bool = True
    has_optimizer_state: bool | None = None  # Adam moments etc. under optimizer.state.
    hash_algorithms: list[str] = field(default_factory=list)  # digests `deep` checked
    note: str | None = None  # how the path was read (a parent dir holding one run), for stderr
    adapter: str | None = None  # a Megatron PEFT adapter among the weights, in one line

    def add(self, severity: str, where: str | Path, message: str) -> None:
        self.findings.append(Finding(severity, str(where), message))

    def ok(self, strict: bool = False) -> bool:
        """No errors; with `strict`, no warnings either, and a manifest whose hashes
        could be checked."""
        bad = {ERROR, WARNING} if strict else {ERROR}
        if strict and not self.has_manifest:
            return False
        return not any(f.severity in bad for f in self.findings)

    def to_dict(self, strict: bool = False) -> dict:
        data = asdict(self)
        data["valid"] = self.ok(strict)
        if strict and not self.has_manifest:  # the text verdict says it; the JSON said nothing
            data["findings"].append(
                asdict(Finding(ERROR, self.checkpoint or self.path, STRICT_NEEDS_MANIFEST))
            )
        return data


def validate_checkpoint(
    path: str | os.PathLike,
    *,
    deep: bool = False,
    progress: Progress | None = None,
    role: str | None = None,
    hf_config: str | os.PathLike | None = None,
    base_progress: ByteProgress | None = None,
    hash_progress: ByteProgress | None = None,
) -> ValidationReport:
    """Validate any level of any layout `layout.resolve_checkpoint` knows (ours, verl,
    Megatron-LM, a bare dist_ckpt dir); `role` picks verl's actor or critic, `hf_config`
    supplies the config a checkpoint without huggingface/ lacks.

    `deep` reports three things as it goes: on a LoRA checkpoint `base_progress` first gets
    (bytes hashed, bytes to hash) of the base model it adapts, which can be far larger than
    the adapter; `hash_progress` then gets the same of the files its manifest records, and
    `progress` (tensors read, tensors) of the checkpoint.

    Raises `layout.CheckpointPathError` only when `path` is not a checkpoint at all.
    """
    layout.refuse_url(path)
    report = ValidationReport(path=str(path), deep=deep)
    paths = _resolve(Path(path), report, role)
    return validate_paths(
        paths,
        report,
        deep=deep,
        progress=progress,
        hf_config=hf_config,
        base_progress=base_progress,
        hash_progress=hash_progress,
    )


class CheckpointRemovedError(MfsdpFailedError, ValueError):
    """The checkpoint went away while it was read, as a run saving with keep_last removes
    its old steps (exit 1: the read failed, nothing says the checkpoint is damaged)."""


def validate_paths(
    paths: layout.CheckpointPaths,
    report: ValidationReport | None = None,
    *,
    deep: bool = False,
    progress: Progress | None = None,
    hf_config: str | os.PathLike | None = None,
    base_progress: ByteProgress | None = None,
    reader: CheckpointReader | None = None,
    hash_progress: ByteProgress | None = None,
) -> ValidationReport:
    """The checks of `validate_checkpoint` on an already resolved checkpoint (`reader`: one
    of its dist_ckpt the caller already holds). CheckpointRemovedError when it was removed
    while it was read: its files then went missing one by one, which read as damage."""
    stamps = _dir_stamps(paths)
    try:
        report = _run_checks(
            paths, report, deep, (progress, base_progress, hash_progress), hf_config, reader
        )
    except Exception:
        _refuse_if_removed(paths, stamps)
        raise
    if not report.ok():
        _refuse_if_removed(paths, stamps)
    return report


_Stamps = list[tuple[int, int] | None]  # (inode, mtime) of each directory, None: not there


def _dir_stamps(paths: layout.CheckpointPaths) -> _Stamps:
    """Identity and last change of the checkpoint's directories (step, dist_ckpt, HF files):
    removing or adding an entry in one changes its mtime, removing it its identity. None
    for one that cannot be looked at."""
    stamps: _Stamps = []
    for directory in dict.fromkeys((paths.step_dir, paths.dist_ckpt, paths.hf_dir)):
        if directory is None:
            continue
        try:
            info = os.stat(directory)
        except OSError:
            stamps.append(None)
            continue
        stamps.append((info.st_ino, info.st_mtime_ns))
    return stamps


def _refuse_if_removed(paths: layout.CheckpointPaths, stamps: _Stamps) -> None:
    """CheckpointRemovedError when the checkpoint's directories are not as they were when
    the read began: nobody writes into a finished checkpoint, but a run saving with
    keep_last deletes its old steps, and a read that met their files going reported
    "their data file __0_0.distcp is missing" as if the step were damaged."""
    if _dir_stamps(paths) == stamps:
        return
    if paths.step_dir is not None and paths.step is not None:
        raise CheckpointRemovedError(
            f"{paths.step_dir}: step {paths.step} was removed while it was read (a run still"
            " saving with keep_last?); read it again"
        )
    raise CheckpointRemovedError(
        f"{paths.dist_ckpt}: changed while it was read (files removed or added); read it again"
    )


def _run_checks(
    paths: layout.CheckpointPaths,
    report: ValidationReport | None,
    deep: bool,
    bars: tuple[Progress | None, ByteProgress | None, ByteProgress | None],
    hf_config: str | os.PathLike | None,
    reader: CheckpointReader | None,
) -> ValidationReport:
    """Every check of `validate_paths`, into `report` (a new one when None); `bars`: its
    (progress, base_progress, hash_progress)."""
    progress, base_progress, hash_progress = bars
    report = report or ValidationReport(path=str(paths.step_dir or paths.dist_ckpt), deep=deep)
    report.checkpoint, report.step = str(paths.dist_ckpt), paths.step
    report.layout, report.role, report.has_manifest = paths.kind, paths.role, paths.has_manifest
    report.note = paths.note
    manifest = _check_manifest(paths, report)
    try:
        reader = reader if reader is not None else CheckpointReader(paths.dist_ckpt)
    except (UnsafeMetadataError, CheckpointFormatError, CheckpointFileError) as err:
        report.add(ERROR, paths.dist_ckpt / layout.DCP_METADATA_FILE, str(err).split(": ", 1)[-1])
        return report
    roots = _state_roots(paths, reader)
    report.tensors = len(reader.tensors)
    report.tensor_bytes = sum(e.nbytes for e in reader.tensors.values())
    report.adapter = stored_adapter_summary(reader)
    _check_files(paths, reader, manifest, report)
    _check_chunks(reader, report)
    _check_storage_entries(reader, report)
    _check_backing(reader, report)
    _check_contents(paths, reader, roots, manifest, report)
    _check_trainer_step(paths, reader, manifest, report)
    optimizer = _check_optimizer_dcp(paths, report)
    record = _optimizer_record(paths, reader, roots, manifest, hf_config)
    if optimizer is None:
        _check_optimizer(reader, roots, report, record)
    else:
        joint = _joint_tables(reader, optimizer)
        _check_optimizer(joint, state_keys.state_roots(joint.tensors), report, record)
    # a LoRA step holds adapters, not the config's weights; a manifest that cannot be read
    # (its error is reported) leaves unknown which it holds
    unread = manifest is None and paths.manifest is not None
    if not unread and (manifest is None or manifest.lora is None):
        _check_against_config(paths, reader, roots, report, hf_config)
    check_base_model(
        manifest, report, deep=deep, source=str(paths.manifest), progress=base_progress
    )
    if deep:
        if manifest is not None:
            _check_hashes(paths, manifest, report, hash_progress)
        _check_json_assets(paths, report)
        readers = [reader] if optimizer is None else [reader, optimizer]
        total, done = sum(len(r.tensors) for r in readers), 0
        for each in readers:
            _check_values(each, report, _shifted(progress, done, total))
            _check_objects(each, report)
            done += len(each.tensors)
    return report


def _shifted(progress: Progress | None, done: int, total: int) -> Progress | None:
    """`progress` told of one reader's tensors as a part of `total` over several readers."""
    if progress is None:
        return None
    return lambda count, _of: progress(done + count, total)


class CheckpointInvalidError(MfsdpFailedError, ValueError):
    """A checkpoint about to be loaded or exported failed validation (first error in the
    message)."""


def require_valid(
    paths: layout.CheckpointPaths,
    *,
    manifest_only: bool = False,
    reader: CheckpointReader | None = None,
) -> ValidationReport | None:
    """Refuse a checkpoint before anyone reads it: the cheap checks of `validate_checkpoint`,
    raising CheckpointInvalidError with the first error.

    Resume and export call this so that a damaged, truncated or booby-trapped checkpoint
    (a path escaping the directory, a symlink out of it, a manifest that disagrees with
    the files) is refused with one clear line instead of failing deep inside DCP or,
    worse, loading. `manifest_only` skips checkpoints without a manifest (bare dist_ckpt
    dirs of Megatron-LM or verl), whose optimizer layouts validate does not know; their
    reads are still confined to the directory by the reader. `reader`: the caller's own
    of `paths.dist_ckpt`, whose `.metadata` is then not read twice (a 3.5M-chunk one
    takes minutes).
    """
    if manifest_only and paths.manifest is None:
        return None
    target = paths.step_dir or paths.dist_ckpt
    report = validate_paths(paths, reader=reader)
    errors = [f"{f.where}: {f.message}" for f in report.findings if f.severity == ERROR]
    if errors:
        raise invalid_checkpoint(errors, target)
    return report


def manifest_hash_errors(
    paths: layout.CheckpointPaths, share: int = 0, count: int = 1, workers: int = 4
) -> list[str]:
    """The digest of every `share`-th of each `count` files the manifest lists (ranks of a
    job split the hashing; `workers` threads each), one line per file whose bytes changed."""
    step_dir = paths.step_dir
    if paths.manifest is None or step_dir is None:
        return []
    manifest = read_manifest(paths.manifest)
    mine = {
        name: manifest.files[name]
        for name in sorted(manifest.files)[share::count]
        if (step_dir / name).is_file()
        and (step_dir / name).stat().st_size == manifest.files[name].size
    }
    actual = rehash_like(step_dir, mine, workers)
    return [
        f"{step_dir / name}: {_HASH_MISMATCH.format(record.algorithm)}"
        for name, record in mine.items()
        if actual[name] != record
    ]


def invalid_checkpoint(errors: list[str], target: Path) -> CheckpointInvalidError:
    """One line: the first error, and how many more `mfsdp ckpt validate` will list."""
    more = (
        f" (+{len(errors) - 1} more; see mfsdp ckpt validate {target})" if len(errors) > 1 else ""
    )
    return CheckpointInvalidError(errors[0] + more)


def _resolve(
    given: Path, report: ValidationReport, role: str | None = None
) -> layout.CheckpointPaths:
    """Resolve like the loader, but report a tracker of ours that names a missing step."""
    tracker = given / layout.TRACKER_FILE
    if _is_our_run_dir(given) and role is None:
        try:
            step = layout.read_tracker(given)
        except layout.DamagedRunDirError as err:
            report.add(ERROR, tracker, str(err).split(": ", 1)[-1])
            step = None
        steps = layout.list_complete_steps(given)
        if step is not None and step not in steps:
            _refuse_if_moved_on(given, step)
            report.add(ERROR, tracker, f"names step {step}, which is missing or incomplete")
        chosen = step if step in steps else (steps[-1] if steps else None)
        if chosen is None:
            raise layout.CheckpointPathError(
                f"{given}: no complete checkpoint step in this run dir"
            )
        paths = layout.resolve_checkpoint(layout.step_dir(given, chosen))
        layout.refuse_pieces_linked_out(given, paths)
        if step == chosen and chosen < steps[-1]:
            newer = _newer_step_note(tracker, step, steps[-1])
            return replace(paths, note="; ".join(filter(None, (paths.note, newer))))
        return paths
    return layout.resolve_checkpoint(given, role=role)


def _refuse_if_moved_on(run: Path, step: int) -> None:
    """CheckpointRemovedError when the tracker, which named `step` (missing now), names
    another step by now: a run saving meanwhile moved it on and removed `step` (keep_last),
    which is no damage of the run dir."""
    try:
        now = layout.read_tracker(run)
    except layout.DamagedRunDirError:
        return
    if now != step:
        raise CheckpointRemovedError(
            f"{run / layout.TRACKER_FILE}: step {step} was removed while it was read (a run"
            f" still saving with keep_last? the tracker names step {now} now); read it again"
        )


def _newer_step_note(tracker: Path, step: int, newest: int) -> str:
    """A complete step newer than the tracker's is no damage: mfsdp's saver renames a step
    into place, then updates the tracker, so a run saving now shows one between the two,
    and a run stopped between them leaves one. Resuming (mfsdp, verl, Megatron-LM) starts
    from the tracker's step, the one validated: the note says so (as a warning it failed
    --strict on a healthy run still saving)."""
    return (
        f"{tracker} names step {step}, which is read and resumed from; step {newest} is"
        " complete too (saved just now, or its run stopped before updating the tracker)"
    )


def _is_our_run_dir(given: Path) -> bool:
    """A run dir mfsdp wrote: a tracker and at least one step with a manifest."""
    return (
        os.path.lexists(given / layout.TRACKER_FILE)
        and not (given / layout.DCP_METADATA_FILE).exists()
        and bool(layout.list_complete_steps(given))
    )


def _check_manifest(paths: layout.CheckpointPaths, report: ValidationReport) -> Manifest | None:
    if paths.manifest is None:
        return None  # bare dist_ckpt (Megatron-LM, verl): nothing to compare against
    try:
        manifest = read_manifest(paths.manifest)
    except ManifestError as err:
        report.add(ERROR, paths.manifest, str(err).split(": ", 1)[-1])
        return None
    if paths.step is not None and manifest.step != paths.step:
        report.add(
            ERROR, paths.manifest, f"says step {manifest.step}, directory is step {paths.step}"
        )
    return manifest


def _check_trainer_step(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    manifest: Manifest | None,
    report: ValidationReport,
) -> None:
    """The step the trainer state records, which a resume continues from, against the
    step of the checkpoint's directory and of its manifest (`trainer_step`)."""
    known = {"its directory": paths.step, "its manifest": manifest.step if manifest else None}
    problem = trainer_step_problem(reader, known)
    if problem is not None:
        report.add(ERROR, paths.dist_ckpt, problem)


def _check_files(paths, reader: CheckpointReader, manifest: Manifest | None, report) -> None:
    needed = _check_data_files(reader, report)
    if manifest is None or paths.step_dir is None:
        report.files = len(needed) + 1
        return
    report.files = len(manifest.files)
    reported = {f.where for f in report.findings}  # a set: 100,000 listed files stay linear
    for name, record in sorted(manifest.files.items()):
        file = paths.step_dir / name
        found = layout.stat_inside(file)
        if found is None or not stat.S_ISREG(found.st_mode):
            if str(file) not in reported:
                report.add(ERROR, file, "listed in the manifest but missing")
        elif found.st_size != record.size:
            report.add(ERROR, file, f"has {found.st_size} bytes, manifest says {record.size}")
    listed = set(manifest.files)
    try:
        present = layout.list_files(paths.step_dir)
    except layout.CheckpointPathError as err:
        report.add(ERROR, paths.step_dir, str(err).split(": ", 1)[-1])
        present = []
    unknown = [name for name in present if name not in listed and name != layout.MANIFEST_FILE]
    for relative in unknown[:MAX_LISTED_PROBLEMS]:
        report.add(WARNING, paths.step_dir / relative, "not listed in the manifest (unknown file)")
    if len(unknown) > MAX_LISTED_PROBLEMS:  # 20,000 junk files are one finding, not 20,000
        report.add(
            WARNING,
            paths.step_dir,
            f"... and {len(unknown) - MAX_LISTED_PROBLEMS} more files not listed in the manifest",
        )
    for name in needed:
        if f"{layout.DIST_CKPT_DIR}/{name}" not in listed:
            report.add(
                ERROR, paths.dist_ckpt / name, "referenced by .metadata but not in the manifest"
            )


def _check_data_files(reader: CheckpointReader, report: ValidationReport) -> dict[str, int]:
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
        report.add(ERROR, reader.root / name, str(err).split(": ", 1)[-1])
        return None
    if size is None:
        report.add(ERROR, reader.root / name, "referenced by .metadata but missing")
    return size


def _check_chunks(reader: CheckpointReader, report: ValidationReport) -> None:
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
    if unwritten > MAX_LISTED_PROBLEMS:
        report.add(
            ERROR,
            reader.root / layout.DCP_METADATA_FILE,
            f"... and {unwritten - MAX_LISTED_PROBLEMS} more chunks without a storage entry",
        )


def _check_storage_entries(reader: CheckpointReader, report: ValidationReport) -> None:
    problems = unclaimed_storage_entries(reader.metadata, reader.tensors, reader.objects)
    for key, message in problems[:MAX_LISTED_PROBLEMS]:
        report.add(ERROR, f"{reader.root / layout.DCP_METADATA_FILE} [{key}]", message)
    if len(problems) > MAX_LISTED_PROBLEMS:
        report.add(
            ERROR,
            reader.root / layout.DCP_METADATA_FILE,
            f"{len(problems) - MAX_LISTED_PROBLEMS} more storage entries no key reads",
        )


def _check_backing(reader: CheckpointReader, report: ValidationReport) -> None:
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


def _state_roots(paths: layout.CheckpointPaths, reader: CheckpointReader) -> state_keys.StateRoots:
    """Where the model and optimizer entries lie; two model entries are refused (exit 2)
    in one line naming the checkpoint and both entries."""
    try:
        return state_keys.state_roots(reader.tensors)
    except state_keys.AmbiguousStateError as err:
        raise state_keys.AmbiguousStateError(f"{paths.dist_ckpt}: {err}") from None


def _check_contents(
    paths,
    reader: CheckpointReader,
    roots: state_keys.StateRoots,
    manifest: Manifest | None,
    report,
) -> None:
    keys = list(reader.tensors) + list(reader.objects)
    present = {
        "model": any(map(roots.is_weight, reader.tensors)),
        "optimizer": any(map(roots.under_optimizer, keys)),
        "optimizer_state": any(roots.state_path(k) is not None for k in reader.tensors),
        "extra": any(k.startswith(state_keys.EXTRA_KEY_PREFIX) for k in keys),
    }
    report.has_optimizer_state = present["optimizer_state"]
    if manifest is not None:
        for kind in manifest.contents:
            if not present[kind]:
                report.add(
                    ERROR,
                    paths.dist_ckpt,
                    f"manifest lists '{kind}' but the checkpoint has no {kind} state",
                )
    if not present["model"]:
        report.add(ERROR, paths.dist_ckpt, f"no model weights ({state_keys.NO_MODEL_WEIGHTS})")


class _TensorTables(Protocol):
    """What pairing optimizer states with parameters reads: a tensor table, one DCP's or
    the model's and optimizer's DCPs' together (`_joint_tables`)."""

    @property
    def tensors(self) -> Mapping[str, TensorEntry]: ...


@dataclass(frozen=True)
class _JointTables:
    tensors: Mapping[str, TensorEntry]


def _joint_tables(model: CheckpointReader, optimizer: CheckpointReader) -> _JointTables:
    """The model's tensors and the optimizer's (its `optimizer.` keys only: one that
    names a weight is reported by `_check_optimizer_dcp`, never taken for it)."""
    states = {k: e for k, e in optimizer.tensors.items() if k.startswith(OPTIMIZER_ENTRY)}
    return _JointTables({**model.tensors, **states})


def _check_optimizer_dcp(
    paths: layout.CheckpointPaths, report: ValidationReport
) -> CheckpointReader | None:
    """A layout's optimizer state in a DCP dir of its own (the HF Trainer's optimizer_0/),
    checked as any DCP is (metadata, shared bytes, data files, chunks, storage entries),
    its keys all under `optimizer.` (all Accelerate saves there). Returns its reader for
    the checks that pair its states with the model's parameters; None when there is no
    such dir or its metadata cannot be read."""
    directory = paths.optimizer_dcp
    if directory is None:
        return None
    metadata = directory / layout.DCP_METADATA_FILE
    try:
        reader = CheckpointReader(directory)
    except (UnsafeMetadataError, CheckpointFormatError, CheckpointFileError) as err:
        report.add(ERROR, metadata, str(err).split(": ", 1)[-1])
        return None
    report.tensors += len(reader.tensors)
    report.tensor_bytes += sum(e.nbytes for e in reader.tensors.values())
    report.files += len(_check_data_files(reader, report)) + 1
    for check in (_check_chunks, _check_storage_entries, _check_backing):
        check(reader, report)
    stray = sorted(
        k for k in [*reader.tensors, *reader.objects] if not k.startswith(OPTIMIZER_ENTRY)
    )
    if stray:
        more = f" (+{len(stray) - 1} more)" if len(stray) > 1 else ""
        report.add(ERROR, f"{metadata} [{stray[0]}]", f"not optimizer state{more}")
    states = any(k.startswith(f"{OPTIMIZER_ENTRY}state.") for k in reader.tensors)
    report.has_optimizer_state = bool(report.has_optimizer_state) or states
    return reader


@dataclass(frozen=True)
class _OptimizerRecord:
    """What the checkpoint says beside its states about which parameters were optimized:
    `tied`, whether its config (or Megatron record) ties the output layer to the embedding
    (None: nothing says); `optimized`, the parameters a record names as stepped, so that one
    without state lost it rather than being frozen."""

    tied: bool | None = None
    optimized: Callable[[str], bool] = lambda name: False


def _optimizer_record(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    roots: state_keys.StateRoots,
    manifest: Manifest | None,
    hf_config: str | os.PathLike | None,
) -> _OptimizerRecord:
    """What the checkpoint records beside its optimizer states (`_OptimizerRecord`)."""
    return _OptimizerRecord(
        _says_tied(paths, reader, hf_config), _recorded_as_optimized(reader, roots, manifest)
    )


def _says_tied(
    paths: layout.CheckpointPaths, reader: CheckpointReader, hf_config: str | os.PathLike | None
) -> bool | None:
    """tie_word_embeddings of the config the weights are checked against (or of the one
    Megatron's record implies); None when there is none, or it cannot be read (the config
    checks report that)."""
    from mfsdp_ckpt.convert.hf_config import expected_weights_for
    from mfsdp_ckpt.convert.megatron_config import recorded_config
    from mfsdp_ckpt.errors import MfsdpError

    config_file = _config_file(paths, hf_config)
    try:
        if config_file is not None:
            root: str | Path = paths.root
            if hf_config is not None:
                root = safe_files.model_dir_root(config_file.parent)
            safe_files.regular_file(config_file, root, str(root))
            return expected_weights_for(config_file, root=root).tie_word_embeddings
        derived = recorded_config(paths, reader)
    except MfsdpError:
        return None
    return None if derived is None else derived.config["tie_word_embeddings"] is True


# Megatron's distributed optimizer records each parameter's group settings beside its
# states: `optimizer.param_to_group_meta.<param>.<lr|betas|...>` next to `optimizer.state.`
_GROUP_META = "param_to_group_meta."


def _recorded_as_optimized(
    reader: CheckpointReader, roots: state_keys.StateRoots, manifest: Manifest | None
) -> Callable[[str], bool]:
    """The parameters (module paths) the checkpoint's own record says its optimizer
    stepped: every one of an mfsdp training step that saved its optimizer (the trainer
    optimizes them all; a LoRA step holds adapters), and those Megatron's optimizer lists in
    `param_to_group_meta` (built from the trainable parameters, whose gradients live in
    its grad buffer, so each one is stepped)."""
    if manifest is not None and manifest.lora is None and "optimizer" in manifest.contents:
        return lambda name: True
    state = roots.optimizer_state
    states = roots.state_prefixes or ((state,) if state is not None else ())
    prefixes = tuple(p.removesuffix("state.") + _GROUP_META for p in states)
    if not prefixes:
        return lambda name: False
    named = set()
    for key in [*reader.objects, *reader.tensors]:
        prefix = next((p for p in prefixes if key.startswith(p)), None)
        if prefix is not None:
            named.add(state_keys.hf_name(key[len(prefix) :].rpartition(".")[0]))
    return named.__contains__


def _check_optimizer(
    reader: _TensorTables,
    roots: state_keys.StateRoots,
    report: ValidationReport,
    record: _OptimizerRecord | None = None,
) -> None:
    """The optimizer's per-parameter tensors must be complete for every parameter it
    stepped and match its shape. Which tensors those are depends on the optimizer: its
    set is recognised from the names the checkpoint holds (`optimizer_states.identify`:
    Adam's moments, Adafactor's factored statistics, Adagrad's sum, ...); a set no
    optimizer here keeps is a warning, its completeness not checked.

    States are matched to parameters by name with entries and wrapper segments removed,
    which covers FSDP2's `optimizer.state.<param>.exp_avg`, torch's DCP recipe's
    `app.optim.state.<param>.exp_avg` beside `app.model.<param>`, and Megatron's
    distributed optimizer, `optimizer.state.module.module.module.<param>.exp_avg` (SwiGLU
    fc1 split into weight_w/weight_v as in the model). A missing state is named by the key
    it would be stored under. A parameter with no state at all was frozen or never stepped
    (a warning), unless `record` names it as optimized (an error); a tied output layer,
    optimized under the embedding's name, needs none. A state that matches no parameter is
    a warning: an optimizer may legitimately hold more than the model state shows.
    """
    record = record or _OptimizerRecord()
    tensors = reader.tensors
    params = {roots.module_path(key): key for key in roots.weight_keys(tensors)}
    found: dict[str, dict[str, str]] = {}
    by_position: dict[str, dict[str, str]] = {}
    unmatched: dict[str, str] = {}  # key -> state name
    for key in tensors:
        rest = roots.state_path(key)
        if rest is None:
            continue
        path, _, state_name = rest.rpartition(".")
        name = state_keys.hf_name(path)
        if name in params:
            found.setdefault(name, {})[state_name] = key
        elif path.isdigit():
            by_position.setdefault(path, {})[state_name] = key
        else:
            unmatched[key] = state_name
    if by_position and not found:
        _check_positional_states(tensors, params, by_position, report)
        return
    if not found and not unmatched:
        return
    held = {s for states in found.values() for s in states} or set(unmatched.values())
    kind = optimizer_states.identify(held)
    if kind is None:
        keys = [key for states in found.values() for key in states.values()] or list(unmatched)
        _report_unknown_states(keys[0], held, report)
    else:
        stateless = _check_states(kind, tensors, params, found, report, record)
        lost = [
            name
            for name in stateless
            if record.optimized(name) and _tied_head(name, params, tensors, record.tied) is False
        ]
        _report_stateless(kind, stateless, lost, roots, params, found, report)
    if unmatched:
        more = f" (+{len(unmatched) - 1} more)" if len(unmatched) > 1 else ""
        first = next(iter(unmatched))
        report.add(WARNING, f"[{first}]", f"optimizer state matches no model parameter{more}")


def _check_states(
    kind: optimizer_states.OptimizerStates,
    tensors: Mapping[str, TensorEntry],
    params: dict[str, str],
    found: dict[str, dict[str, str]],
    report: ValidationReport,
    record: _OptimizerRecord,
) -> list[str]:
    """Each parameter holding states holds `kind`'s whole set, each shaped like it (an
    error per state lost or misshapen); returns the parameters holding none."""
    stateless = []
    for name, key in params.items():
        states = found.get(name, {})
        if not states:
            if _tied_head(name, params, tensors, record.tied) is not True:
                stateless.append(name)
            continue
        for state in kind.missing(states):
            expected = f"{next(iter(states.values())).rpartition('.')[0]}.{state}"
            report.add(ERROR, f"[{key}]", f"optimizer state {state} is missing (no [{expected}])")
        for state, state_key in states.items():
            if state in kind.like_parameter and tensors[state_key].shape != tensors[key].shape:
                report.add(
                    ERROR,
                    f"[{state_key}]",
                    f"shape {tensors[state_key].shape} differs from the parameter's"
                    f" {tensors[key].shape}",
                )
    return stateless


def _report_stateless(
    kind: optimizer_states.OptimizerStates,
    stateless: list[str],
    lost: list[str],
    roots: state_keys.StateRoots,
    params: dict[str, str],
    found: dict[str, dict[str, str]],
    report: ValidationReport,
) -> None:
    """Parameters without any state: those in `lost` (a record names them as optimized)
    lost their states, an error per state named by the key it would have; the others were
    frozen (requires_grad off), never got a gradient, or are an output layer no config
    says is tied, which a checkpoint cannot tell from a loss: one warning naming them."""
    lead = _optimizer_lead(roots, params, found)
    for name in lost:
        for state in kind.missing(()):
            expected = _state_key(roots, params[name], {}, state, lead)
            report.add(
                ERROR, f"[{params[name]}]", f"optimizer state {state} is missing (no [{expected}])"
            )
    errors = set(lost)
    rest = [params[name] for name in stateless if name not in errors]
    if not rest:
        return
    others = ", ".join(f"[{key}]" for key in rest[1:_SHOWN_STATELESS])
    more = rest[_SHOWN_STATELESS:]
    listed = f"; also {others}" if others else ""
    listed += f" (+{len(more)} more)" if more else ""
    report.add(
        WARNING,
        f"[{rest[0]}]",
        f"no optimizer state, while {len(found)} of the {len(found) + len(stateless)}"
        f" parameters hold {kind.name}'s: frozen, or never stepped, so not checked{listed}",
    )


_SHOWN_STATELESS = 3  # keys a warning about parameters without state names
_SHOWN_STATE_NAMES = 8


def _report_unknown_states(first: str, held: set[str], report: ValidationReport) -> None:
    """States of an optimizer this check does not know (bitsandbytes' 8-bit state1/qmap1,
    a custom one): whether a parameter lacks one cannot be told, so nothing is judged."""
    names = sorted(held)
    shown = ", ".join(names[:_SHOWN_STATE_NAMES])
    shown += ", ..." if len(names) > _SHOWN_STATE_NAMES else ""
    report.add(
        WARNING,
        f"[{first}]",
        f"optimizer states {shown} are no known optimizer's set"
        f" ({optimizer_states.known_names()}): their completeness is not checked",
    )


def _check_positional_states(
    tensors: Mapping[str, TensorEntry],
    params: dict[str, str],
    states: dict[str, dict[str, str]],
    report: ValidationReport,
) -> None:
    """torch's own `Optimizer.state_dict()` (what Megatron-LM's torch_dcp format and plain
    `dcp.save({"optim": opt.state_dict()})` save) keys each state by the parameter's
    position in its param groups, which the checkpoint does not tie to a name (Megatron
    orders them by weight-decay group). What can be checked is checked: each parameter
    holds its optimizer's whole set of states, each shaped like some parameter, and no
    more positions than parameters."""
    held = {name for names in states.values() for name in names}
    kind = optimizer_states.identify(held)
    first = next(iter(states[min(states, key=int)].values()))
    if kind is None:
        _report_unknown_states(first, held, report)
    else:
        shapes = {tensors[key].shape for key in params.values()}
        for position in sorted(states, key=int):
            _check_position(kind, tensors, shapes, states[position], report)
    if len(states) > len(params):
        report.add(
            ERROR,
            f"[{next(iter(states[max(states, key=int)].values()))}]",
            f"{len(states)} parameters' optimizer states for the model's {len(params)}",
        )
    report.add(
        WARNING,
        f"[{first}]",
        f"optimizer state of {len(states)} parameters keyed by position (torch's"
        " Optimizer.state_dict()), not by name: each is shaped like a parameter, but which"
        " parameter it belongs to is not recorded, so the pairing is not checked",
    )


def _check_position(
    kind: optimizer_states.OptimizerStates,
    tensors: Mapping[str, TensorEntry],
    shapes: set[tuple[int, ...]],
    names: dict[str, str],
    report: ValidationReport,
) -> None:
    """One positional parameter's states: `kind`'s whole set, each shaped like some
    parameter (which one is not recorded)."""
    some = next(iter(names.values()))
    for state in kind.missing(names):
        expected = f"{some.rpartition('.')[0]}.{state}"
        report.add(ERROR, f"[{some}]", f"optimizer state {state} is missing ([{expected}])")
    for state, key in names.items():
        if state in kind.like_parameter and tensors[key].shape not in shapes:
            report.add(ERROR, f"[{key}]", f"shape {tensors[key].shape} is no model parameter's")


def _optimizer_lead(
    roots: state_keys.StateRoots, params: dict[str, str], found: dict[str, dict[str, str]]
) -> str:
    """What the optimizer's names put before a parameter's path in place of the model's
    leading wrapper segments (Megatron's distributed optimizer: `module.module.module.`
    where the model has `module.`), learnt from a parameter whose state is there; "" when
    none tells."""
    prefix = roots.optimizer_state or ""
    for name, states in found.items():
        state_path = next(iter(states.values()))[len(prefix) :].rpartition(".")[0]
        core = _unwrapped(roots.path_in_entry(params[name]))
        if state_path.endswith(core):
            return state_path[: len(state_path) - len(core)]
    return ""


def _state_key(
    roots: state_keys.StateRoots, param: str, states: dict[str, str], moment: str, lead: str
) -> str:
    """The key `moment` of parameter `param` would be stored under: beside the parameter's
    other states, else its path under the optimizer's state as the others are named."""
    if states:
        return f"{next(iter(states.values())).rpartition('.')[0]}.{moment}"
    return f"{roots.optimizer_state}{lead}{_unwrapped(roots.path_in_entry(param))}.{moment}"


def _unwrapped(path: str) -> str:
    """`module.decoder.layers.0.x` -> `decoder.layers.0.x`: leading wrapper segments off."""
    parts = path.split(".")
    while len(parts) > 1 and parts[0] in state_keys.WRAPPER_SEGMENTS:
        parts.pop(0)
    return ".".join(parts)


def _tied_head(
    name: str, params: dict[str, str], tensors: Mapping[str, TensorEntry], tied: bool | None
) -> bool | None:
    """Whether `name` is a tied output layer's second name: saved twice in the model state
    but optimized once, under the embedding's, so it needs no state of its own. True when
    the config (or Megatron's record) ties them, or the checkpoint stores it as the
    embedding's own bytes (import-hf's alias); False for an untied one or any other
    parameter; None for an output layer beside an embedding that nothing says is tied."""
    for out, inp in state_keys.TIED_PAIRS:  # saved twice, optimized once
        if not name.endswith(out):
            continue
        embedding = next((key for path, key in params.items() if path.endswith(inp)), None)
        if embedding is None:
            return False
        if tied is True or tied_head.stored_once(tensors[params[name]], tensors[embedding]):
            return True
        return None if tied is None else False
    return False


def _config_file(paths: layout.CheckpointPaths, hf_config: str | os.PathLike | None) -> Path | None:
    """The config.json to check weights against, or None when there is none to check. One
    that exists but is no regular file (a directory, a FIFO, a link loop) is returned, so
    the check reports it: export refuses it, so validate must not call the step valid."""
    if hf_config is not None:
        given = Path(hf_config)
        return given / "config.json" if given.is_dir() else given
    if paths.hf_assets is None:
        return None
    if layout.stat_inside(paths.hf_assets / "config.json", follow_symlinks=False) is None:
        return None
    return paths.hf_assets / "config.json"


def _check_against_config(
    paths,
    reader: CheckpointReader,
    roots: state_keys.StateRoots,
    report: ValidationReport,
    hf_config: str | os.PathLike | None = None,
) -> None:
    """Weights against the config export would use: names and shapes always; with `deep`
    (which reads values) also a tied config's stored head against the embedding."""
    config_file = _config_file(paths, hf_config)
    if config_file is None:
        _check_against_recorded_config(paths, reader, report)
        return
    from mfsdp_ckpt.convert.hf_config import HFConfigError, expected_weights_for

    # huggingface/ stays inside the checkpoint; a --hf-config model dir inside itself (or
    # its Hugging Face cache folder), as export and import read one
    root, within = paths.root, "the checkpoint"
    if hf_config is not None:
        root = safe_files.model_dir_root(config_file.parent)
        within = f"the model dir {config_file.parent}"
    try:
        safe_files.regular_file(config_file, root, within)
        expected = expected_weights_for(config_file, root=root)
    except CheckpointFileError as err:
        report.add(ERROR, config_file, str(err).split(": ", 1)[-1])
        return
    except HFConfigError as err:
        report.add(ERROR, config_file, str(err).split(": ", 1)[-1])
        return
    _check_config_against_record(paths, reader, report, config_file, root)
    if report.deep:  # imports transformers (seconds): not in the checks before each export
        _check_config_loads(report, config_file, root)
    from mfsdp_ckpt.convert.fused_experts import hub_expert_names

    # experts fused as transformers 5.x holds them in memory are checked as the per-expert
    # tensors of the hub's files, which the config's expectations name
    weights = {roots.module_path(k): k for k in roots.weight_keys(reader.tensors)}
    stored = hub_expert_names(
        {path: reader.tensors[key].shape for path, key in weights.items()}, expected.model_type
    )
    if stored and not set(stored) & set(expected.allowed):
        _check_mapped_against_config(paths, reader, report, config_file)
        return

    def where(name: str) -> str:  # the stored key (experts fused in it: the name it would have)
        return f"[{weights.get(name) or roots.stored_name(name)}]"

    for name, shape in expected.required.items():
        found = stored.get(name)
        if found is None:
            report.add(
                ERROR, where(name), f"missing; {config_file} ({expected.model_type}) expects it"
            )
        elif found != shape:
            report.add(ERROR, where(name), f"shape {found}, {config_file} expects {shape}")
    for name in sorted(set(stored) - set(expected.allowed)):
        report.add(ERROR, where(name), f"unexpected for {expected.model_type} per {config_file}")
    if report.deep and expected.tie_word_embeddings:
        _check_tied_head(reader, weights, report, config_file)


def _check_tied_head(
    reader: CheckpointReader, weights: dict[str, str], report: ValidationReport, config_file: Path
) -> None:
    """A tied config's export writes the embedding alone: a stored `lm_head.weight` that
    differs from it (trained untied) is refused there, so it fails here. Two tensors'
    values, compared a bounded piece at a time (nothing read when the head is stored as
    the embedding's own bytes): a `deep` check, as NaN is, which export also refuses."""
    head, embedding = weights.get(tied_head.HEAD), weights.get(tied_head.EMBEDDING)
    if head is None or embedding is None:
        return
    try:
        same = tied_head.dcp_tensors_equal(reader, head, embedding)
    except (CheckpointFormatError, CheckpointFileError) as err:
        report.add(ERROR, f"[{head}]", f"not compared with [{embedding}]: {err}")
        return
    if not same:
        remedy = "use a config with tie_word_embeddings false"
        report.add(ERROR, f"[{head}]", tied_head.untied_head(embedding, str(config_file), remedy))


def _check_config_against_record(
    paths, reader: CheckpointReader, report: ValidationReport, config_file: Path, root
) -> None:
    """A config.json that contradicts the model the checkpoint's own record describes
    (Bridge's run_config.yaml, Megatron-LM's args) gives tensors of the same shapes a wrong
    q/k/v split or cut vocabulary: export refuses it, so validate must not pass it. A
    record that derives no config leaves it uncompared: a warning says so."""
    from mfsdp_ckpt.convert.hf_config import read_config_json
    from mfsdp_ckpt.convert.record_agreement import contradiction, unchecked_note

    found = contradiction(read_config_json(config_file, root)[1], paths, reader)
    if found is not None:
        report.add(ERROR, config_file, found)
    elif (unchecked := unchecked_note(paths, reader)) is not None:
        report.add(WARNING, config_file, unchecked)


def _check_config_loads(report: ValidationReport, config_file: Path, root) -> None:
    """A config.json transformers' config class refuses (`rms_norm_eps: "1e-6"`, a
    `layer_types` not one per layer) is an error: every shape in it may be right, but
    `from_pretrained` refuses the model, and export-hf --verify refuses to write it."""
    from mfsdp_ckpt.convert.hf_config import HFConfigError, read_config_json, refuse_unloadable

    try:
        refuse_unloadable(read_config_json(config_file, root)[1], config_file)
    except HFConfigError as err:
        report.add(ERROR, config_file, str(err).split(": ", 1)[-1])


def _check_mapped_against_config(
    paths, reader: CheckpointReader, report: ValidationReport, config_file: Path
) -> None:
    """Weights not named as in transformers (Megatron-core's GPTModel): map them as export
    would and check every resulting shape against the config, before anyone exports."""
    from mfsdp_ckpt.convert.export_source import load_config

    _check_plan(paths, reader, report, config_file, lambda: load_config(config_file))


def _check_against_recorded_config(
    paths, reader: CheckpointReader, report: ValidationReport
) -> None:
    """Without a Hugging Face config, the one the checkpoint's own record implies
    (Megatron-LM's args, Megatron-Bridge's run_config.yaml), as export derives it. A record
    that describes a model no family here computes (LayerNorm, a sigmoid MoE router) or
    lacks the sizes, or no record, leaves the check out: the checkpoint is not damaged by
    it, but the verdict must not read as if its shapes were checked (a warning says so).
    One that cannot be read (a pickle naming os.system, bad YAML) is an error."""
    from mfsdp_ckpt.convert.export_source import json_config
    from mfsdp_ckpt.convert.hf_config import HFConfigError
    from mfsdp_ckpt.convert.megatron_config import (
        MegatronConfigError,
        MegatronSettingsMissing,
        recorded_config,
    )

    try:
        derived = recorded_config(paths, reader)
    except MegatronSettingsMissing as err:
        report.add(WARNING, paths.dist_ckpt, f"{NO_HF_CONFIG}; {err.lacking()}")
        return
    except MegatronConfigError as err:
        report.add(WARNING, paths.dist_ckpt, f"{NO_HF_CONFIG}; {err}")
        return
    except (CheckpointFormatError, CheckpointFileError) as err:
        where, _, message = str(err).partition(": ")
        report.add(ERROR, where, message or str(err))
        return
    if derived is None:
        report.add(WARNING, paths.dist_ckpt, NO_HF_CONFIG)
        return
    record = derived

    def config() -> object:
        made = json_config(record.config, record.source)
        if made is None:  # every family a record maps to has a name_maps table
            raise HFConfigError(f"{record.source}: no name table for {record.config['model_type']}")
        return made

    _check_plan(paths, reader, report, derived.source, config)


def _check_plan(paths, reader, report: ValidationReport, where, config_of) -> None:
    from mfsdp_ckpt.convert.export_errors import (
        ExportError,
        ExportUsageError,
        ForeignWeightsError,
    )
    from mfsdp_ckpt.convert.export_plan import plan_export
    from mfsdp_ckpt.convert.export_source import source_for
    from mfsdp_ckpt.convert.hf_config import HFConfigError
    from mfsdp_ckpt.convert.megatron_lora_export import adapter_only_checkpoint
    from mfsdp_ckpt.convert.mtp import DROP_MTP_FLAG

    source = source_for(paths, reader)
    if adapter_only_checkpoint(source):  # a LoRA adapter saved alone: its shapes are checked
        _check_adapter(source, report, where, config_of)
        return
    try:
        plan = plan_export(source, config_of(), drop_mtp=True, compare_tied_head=False)
    except ForeignWeightsError as err:  # whole, maybe, but no model this config describes
        what = str(err).removeprefix(f"{source.location} ")
        report.add(WARNING, where, f"weights not checked against this config: {what}")
    except (ExportError, ExportUsageError, HFConfigError) as err:
        report.add(
            ERROR, where, f"the weights do not fit this config: {str(err).split(': ', 1)[-1]}"
        )
    else:  # the main model fits; MTP layers have no counterpart in the config to check
        if plan.mtp is not None:
            report.add(
                WARNING,
                f"[{plan.mtp.first_key}]",
                f"{plan.mtp.summary()} not checked against {where}: the transformers model"
                " export writes from it has no MTP module; export-hf refuses them unless"
                f" {DROP_MTP_FLAG} leaves them out",
            )


def _check_adapter(source, report: ValidationReport, where, config_of) -> None:
    """A LoRA adapter saved without its base (Megatron-Bridge's PEFT save, the HF Trainer's
    adapter-only one): each A and B against the shape of the weight the config gives the
    module it adapts, as export checks them before merging."""
    from mfsdp_ckpt.convert.export_errors import (
        ExportError,
        ExportUsageError,
        ForeignWeightsError,
    )
    from mfsdp_ckpt.convert.export_plan import plan_adapter
    from mfsdp_ckpt.convert.hf_config import HFConfigError

    try:
        plan_adapter(source, config_of(), drop_mtp=True)
    except (ForeignWeightsError, ExportUsageError) as err:  # a variant, adapters on MTP only
        what = str(err).removeprefix(f"{source.location} ")
        report.add(WARNING, where, f"adapter not checked against this config: {what}")
    except (ExportError, HFConfigError) as err:  # its tensor named, the checkpoint is said
        what = str(err).removeprefix(f"{source.location} ")
        report.add(ERROR, where, f"the adapter does not fit this config: {what}")


def _check_hashes(
    paths, manifest: Manifest, report: ValidationReport, progress: ByteProgress | None
) -> None:
    """The digest of every file the manifest records whose size is right (a wrong size is
    _check_files' finding), reported to `progress` as bytes: gigabytes of a large step."""
    report.hash_algorithms = sorted({record.algorithm for record in manifest.files.values()})
    sized = {}
    for name, record in sorted(manifest.files.items()):
        found = layout.stat_inside(paths.step_dir / name)
        if found is not None and stat.S_ISREG(found.st_mode) and found.st_size == record.size:
            sized[name] = record
    hashed = HashedBytes(sum(record.size for record in sized.values()), progress)
    for name, record in sized.items():
        file = paths.step_dir / name
        try:
            if hash_file(file, paths.step_dir, record.algorithm, on_block=hashed.add) != record:
                report.add(ERROR, file, _HASH_MISMATCH.format(record.algorithm))
        except CheckpointFileError as err:  # a link out of the step or a special file: never read
            report.add(ERROR, file, str(err).split(": ", 1)[-1])


def _check_json_assets(paths: layout.CheckpointPaths, report: ValidationReport) -> None:
    """The JSON files of the checkpoint's own HF dir, as export checks them before it copies
    them (bounded in size and in what parsing them costs, each key once, no NaN, an
    object where transformers reads one): export refuses them, so validate must not pass
    them."""
    from mfsdp_ckpt.convert.export_source import check_json_assets

    hf_dir = paths.hf_assets
    if hf_dir is None or not hf_dir.is_dir():
        return
    try:
        check_json_assets(hf_dir, paths.root, paths.hf_skip)
    except (CheckpointFileError, layout.CheckpointPathError) as err:
        where, _, message = str(err).partition(": ")
        report.add(ERROR, where, message or str(err))


MAX_OBJECT_CHECK_BYTES = 64 << 20  # larger non-tensor blobs are checked for size only


def _check_objects(reader: CheckpointReader, report: ValidationReport) -> None:
    """Every non-tensor blob (args, iteration, RNG state, scheduler) is a whole torch.save
    archive whose stored members match their CRCs. Checked as a zip container only: the
    pickle inside is not loaded, so nothing in it (an argparse.Namespace, numpy RNG
    arrays, or a crafted class) is ever constructed."""
    import io
    import zipfile

    missing = _missing_files(reader)
    unread: dict[str, list[str]] = {}
    for name, entry in sorted(reader.objects.items()):
        where = f"[{name}]"
        if entry.file in missing:
            unread.setdefault(entry.file, []).append(name)
            continue
        if entry.file is None:
            report.add(
                ERROR, where, "non-tensor entry has no storage entry (its bytes were never written)"
            )
            continue
        if entry.transforms or entry.length > MAX_OBJECT_CHECK_BYTES:
            continue
        try:
            raw = reader.store.read_range(entry.file, entry.file_offset, entry.length)
        except CheckpointFileError as err:
            report.add(ERROR, where, str(err).split(": ", 1)[-1])
            continue
        try:
            with zipfile.ZipFile(io.BytesIO(raw)) as archive:
                members = archive.infolist()
                if not any(m.filename.endswith("data.pkl") for m in members):
                    report.add(ERROR, where, "blob is not a torch.save archive (no data.pkl)")
                elif any(m.compress_type != zipfile.ZIP_STORED for m in members):
                    report.add(
                        WARNING, where, "blob has compressed members (torch.save never writes them)"
                    )
                elif archive.testzip() is not None:
                    report.add(
                        ERROR,
                        where,
                        f"blob member {archive.testzip()} fails its CRC (bytes changed)",
                    )
        except (zipfile.BadZipFile, ValueError, EOFError) as err:
            report.add(ERROR, where, f"blob is not a readable torch.save archive ({err})")
    _report_unread(unread, report)


def _check_values(
    reader: CheckpointReader, report: ValidationReport, progress: Progress | None
) -> None:
    entries = list(reader.tensors.values())
    missing = _missing_files(reader)
    unread: dict[str, list[str]] = {}  # a data file reported missing -> the tensors in it
    for done, entry in enumerate(entries, 1):
        where = f"[{entry.name}]"
        gone = next((c.file for c in entry.chunks if c.file in missing), None)
        if gone is not None:  # said once for its file, not once per tensor
            unread.setdefault(gone, []).append(entry.name)
        elif not reader.coverage_problems(entry):
            try:
                tensor = reader.read_tensor(entry.name)
            except (CheckpointFormatError, CheckpointFileError) as err:
                report.add(ERROR, where, str(err))
            else:
                nonfinite = count_nonfinite_tensor(tensor)
                if nonfinite:
                    nans = count_nan_tensor(tensor)
                    infs = nonfinite - nans
                    report.add(ERROR, where, f"{nans} NaN and {infs} Inf values")
        if progress:
            progress(done, len(entries))
    _report_unread(unread, report)


def _missing_files(reader: CheckpointReader) -> set[str]:
    """The data files the metadata names that are absent: the file checks report each once,
    so the deep reads skip what lies in them (one line per tensor repeated that finding)."""
    files = {c.file for e in reader.tensors.values() for c in e.chunks if c.file}
    files |= {entry.file for entry in reader.objects.values() if entry.file}
    found = set()
    for file in files:
        try:
            if reader.store.size(file) is None:
                found.add(file)
        except CheckpointFileError:  # a link out, a FIFO: reported there, read here to name it
            continue
    return found


def _report_unread(unread: dict[str, list[str]], report: ValidationReport) -> None:
    for file, names in unread.items():
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        report.add(ERROR, f"[{names[0]}]{more}", f"not read: their data file {file} is missing")
