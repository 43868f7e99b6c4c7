"""`mfsdp ckpt validate`: every check a checkpoint must pass before anyone trusts it.

Each check appends `Finding`s naming the file or tensor and what is wrong; nothing here
raises for a bad checkpoint (a missing path is the caller's usage error), only for one
removed while it was read (`CheckpointRemovedError`: its findings would say nothing of
it). The cheap checks (metadata, files, chunk coverage, optimizer/model/config agreement,
tracker, and each non-tensor entry's pickle for code torch's own DCP load would run:
`object_pickles`) always run (bytes shared between entries, but for a tied head's alias, are
refused as the metadata is read: `shared_bytes`); `deep=True` adds each file's digest
against the manifest (the algorithm its record names: xxh3_128, or sha256 in older
manifests) and reading every tensor (NaN/Inf counts).

Checkpoints verl and Megatron-LM write have no manifest: every check that needs none
still runs (coverage, each chunk inside its file, file sizes, values, shapes against the
HF config), the report says that hashes were not checked, and `strict` refuses them.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from mfsdp_ckpt.check.asset_checks import check_export_assets
from mfsdp_ckpt.check.config_checks import check_against_config, check_lora_against_config
from mfsdp_ckpt.check.object_archives import ArchiveVerdicts
from mfsdp_ckpt.check.object_pickles import check_object_pickles
from mfsdp_ckpt.check.optimizer_checks import (
    check_optimizer,
    check_optimizer_dcp,
    joint_tables,
    optimizer_record,
    optimizer_value_check,
)
from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.check.removed_while_read import (
    dir_stamps,
    refuse_if_moved_on,
    refuse_if_removed,
)
from mfsdp_ckpt.check.report import ERROR, WARNING, Progress, ValidationReport
from mfsdp_ckpt.check.step_dir_name import misnamed_step
from mfsdp_ckpt.check.storage_checks import (
    HASH_MISMATCH,
    check_backing,
    check_chunks,
    check_files,
    check_hashes,
    check_objects,
    check_storage_entries,
    check_values,
    files_not_readable,
)
from mfsdp_ckpt.check.trainer_step import checkpoint_step, trainer_step_problems
from mfsdp_ckpt.convert.megatron_lora import stored_adapter_summary
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format import checkpoint_resolution, layout, path_refusals, run_steps, state_keys
from mfsdp_ckpt.format.dcp_metadata import UnsafeMetadataError
from mfsdp_ckpt.format.file_hash import ByteProgress, rehash_like
from mfsdp_ckpt.format.manifest import Manifest, ManifestError, read_manifest
from mfsdp_ckpt.format.verl_contents import VerlContentsError
from mfsdp_ckpt.lora import check_base_model
from mfsdp_ckpt.retention import doomed_entries
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import (
    CheckpointFormatError,
    CheckpointReader,
)


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
    """Validate any level of any layout `resolve_checkpoint` knows (ours, verl,
    Megatron-LM, a bare dist_ckpt dir); `role` picks verl's actor or critic, `hf_config`
    supplies the config a checkpoint without huggingface/ lacks.

    `deep` reports three things as it goes: on a LoRA checkpoint `base_progress` first gets
    (bytes hashed, bytes to hash) of the base model it adapts, which can be far larger than
    the adapter; `hash_progress` then gets the same of the files its manifest records, and
    `progress` (tensors read, tensors) of the checkpoint.

    Raises `layout.CheckpointPathError` only when `path` is not a checkpoint at all; a
    path that is damage resolving it meets (a save that did not finish, a run dir whose saves
    never did) is reported as an invalid checkpoint (`ValidationReport.not_read`), and a run
    dir whose tracker failed as that, with its complete steps (`tracker_failed`).
    """
    path_refusals.refuse_url(path)
    report = ValidationReport(path=str(path), deep=deep)
    try:
        paths = _resolve(Path(path), report, role)
    except VerlContentsError as err:  # a verl v2 step whose ckpt_contents.json is damaged
        where = err.file if err.file is not None else Path(path)
        report.checkpoint, report.has_manifest = str(where.parent), False
        report.add_error(where, err)
        return report
    except layout.DamagedTrackerError as err:  # the steps beside it are offered
        report.tracker_failed(err.tracker, err, run_steps.complete_step_dirs(err.run))
        return report
    except (layout.IncompleteCheckpointError, layout.DamagedRunDirError) as err:
        report.not_read(_named_first(str(err), path), err)  # damage: the verdict, not a failure
        return report
    return validate_paths(
        paths,
        report,
        deep=deep,
        progress=progress,
        hf_config=hf_config,
        base_progress=base_progress,
        hash_progress=hash_progress,
    )


def _named_first(line: str, given: str | os.PathLike) -> str:
    """The path `line` starts with: its longest start, up to a space or ": ", that is on disk
    (a tracker, a step, a DCP dir), or the path `given` where none is. A line that names a
    tracker and then the step it names ("RUN/latest_checkpointed_iteration.txt names '2',
    but RUN/global_step_2/dist_ckpt: ...") is said under the tracker, as validate says a
    tracker's own findings; cut at the first ": ", its place read "... names '2', but ..."."""
    ends = [index for index, char in enumerate(line) if char == " " or line.startswith(": ", index)]
    for end in reversed(ends):
        if os.path.lexists(line[:end]):
            return line[:end]
    return str(given)


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
    stamps = dir_stamps(paths)
    try:
        report = _run_checks(
            paths, report, deep, (progress, base_progress, hash_progress), hf_config, reader
        )
    except Exception:
        refuse_if_removed(paths, stamps)
        raise
    if not report.ok():
        refuse_if_removed(paths, stamps)
    return report


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
        report.add_error(paths.dist_ckpt / layout.DCP_METADATA_FILE, err)
        return report
    shown = checkpoint_step(paths, reader)
    report.step, report.step_from = shown.step, shown.source
    _check_metadata_tail(paths, reader, report)
    roots = _state_roots(paths, reader)
    report.tensors = len(reader.tensors)
    report.tensor_bytes = sum(e.nbytes for e in reader.tensors.values())
    report.adapter = stored_adapter_summary(reader)
    check_files(paths, reader, manifest, report)
    check_chunks(reader, report)
    check_storage_entries(reader, report)
    check_backing(reader, report)
    _check_contents(paths, reader, roots, manifest, report)
    _check_trainer_step(paths, reader, manifest, report)
    optimizer = check_optimizer_dcp(paths, report)
    record = optimizer_record(paths, reader, roots, manifest, hf_config)
    readers = [reader] if optimizer is None else [reader, optimizer]
    # --deep checks every non-tensor blob as an archive from the bytes read here: once each
    archives = [ArchiveVerdicts() if deep else None for _ in readers]
    for each, verdicts in zip(readers, archives):
        check_object_pickles(each, report, files_not_readable(each), verdicts)
    tables = reader if optimizer is None else joint_tables(reader, optimizer)
    state_roots = roots if optimizer is None else state_keys.state_roots(tables.tensors)
    check_optimizer(tables, state_roots, report, record)
    # a LoRA step holds adapters, not the config's weights; a manifest that cannot be read
    # (its error is reported) leaves unknown which it holds
    unread = manifest is None and paths.manifest is not None
    errors_before = _errors(report)
    if not unread and (manifest is None or manifest.lora is None):
        check_against_config(paths, reader, roots, report, hf_config)
    elif manifest is not None:  # its adapters against the weights they add to
        check_lora_against_config(paths, reader, roots, report, hf_config)
    _check_assets(paths, report, hf_config)
    if deep and hf_config is not None and _errors(report) > errors_before:
        # the given config is refused in seconds: not after minutes of reading every byte
        report.add(WARNING, paths.dist_ckpt, DEEP_SKIPPED)
        deep = report.deep = False
    check_base_model(
        manifest, report, deep=deep, source=str(paths.manifest), progress=base_progress
    )
    if deep:
        also = None
        if manifest is not None:
            check_hashes(paths, manifest, report, hash_progress)
        else:  # no digest vouches for the optimizer's values: check them as they are read
            also = optimizer_value_check(state_roots)
        total, done = sum(_value_bytes(r) for r in readers), 0
        for each, verdicts in zip(readers, archives):
            # a manifest's digests vouch for every byte; without one, each record's CRC
            crcs = paths.manifest is None
            check_values(each, report, _shifted(progress, done, total), also, crcs=crcs)
            check_objects(each, report, verdicts)
            done += _value_bytes(each)
    return report


DEEP_SKIPPED = (
    "values not read (--deep): the checks against the --hf-config given failed above;"
    " fix those first"
)


def _errors(report: ValidationReport) -> int:
    return sum(finding.severity == ERROR for finding in report.findings)


def _check_assets(
    paths: layout.CheckpointPaths, report: ValidationReport, hf_config: str | os.PathLike | None
) -> None:
    """`check_export_assets`, but a file an earlier check already named in an error (a
    manifest-listed FIFO or link out of the checkpoint) is one defect, said once."""
    assets = ValidationReport(path=report.path, deep=report.deep)
    check_export_assets(paths, assets, hf_config)
    said = {f.where for f in report.findings if f.severity == ERROR}
    for finding in assets.findings:
        if finding.where not in said:
            report.add(finding.severity, finding.where, finding.message)


def _check_metadata_tail(
    paths: layout.CheckpointPaths, reader: CheckpointReader, report: ValidationReport
) -> None:
    """Bytes after the .metadata pickle's STOP: DCP never writes them and torch's reader
    never reads them (nor does this one), so they change nothing a load sees; but a file
    that is not what DCP wrote is worth a line."""
    after = reader.bytes_after_metadata
    if after:
        report.add(
            WARNING,
            paths.dist_ckpt / layout.DCP_METADATA_FILE,
            f"{after:,} bytes after the metadata pickle (DCP writes none; torch's reader, and"
            " this one, stop at the pickle's end)",
        )


def _value_bytes(reader: CheckpointReader) -> int:
    return sum(entry.nbytes for entry in reader.tensors.values())


def _shifted(progress: Progress | None, done: int, total: int) -> Progress | None:
    """`progress` told of one reader's tensor bytes as a part of `total` over several
    readers."""
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
        f"{step_dir / name}: {HASH_MISMATCH.format(record.algorithm)}"
        for name, record in mine.items()
        if actual[name] != record
    ]


def invalid_checkpoint(errors: list[str], target: Path) -> CheckpointInvalidError:
    """One line: the first error, how many more there are, and where they are all listed."""
    see = f"; see mfsdp ckpt validate {target}" if len(errors) > 1 else ""
    return CheckpointInvalidError(first_of(errors, 1) + see)


def _resolve(
    given: Path, report: ValidationReport, role: str | None = None
) -> layout.CheckpointPaths:
    """Resolve like the loader, but report a tracker of ours that names a missing step."""
    tracker = given / layout.TRACKER_FILE
    if _is_our_run_dir(given) and role is None:
        report.read_from_run(given, tracker)
        try:
            step = run_steps.read_tracker(given)
        except layout.DamagedRunDirError as err:
            report.add_error(tracker, err)
            step = None
        steps = run_steps.list_complete_steps(given)
        for where, doomed in doomed_entries(given):
            report.add(WARNING, where, doomed)
        if step is not None and step not in steps:
            refuse_if_moved_on(given, step)
            run_steps.refuse_tracked_step_holding_no_save(given, step)
            report.add(ERROR, tracker, _tracked_step_not_complete(given, step))
        chosen = step if step in steps else (steps[-1] if steps else None)
        if chosen is None:
            raise layout.CheckpointPathError(
                f"{given}: no complete checkpoint step in this run dir"
            )
        paths = checkpoint_resolution.resolve_checkpoint(layout.step_dir(given, chosen))
        path_refusals.refuse_pieces_linked_out(run_steps.confining_dir(given, paths.root), paths)
        if step != chosen:  # the tracker is at fault: an error above says so
            return paths
        # the step dir resolved alone has lost the run dir's note, which inspect and
        # export-hf print: what checkpoint.resume=auto does with this run dir
        refusal = run_steps.resume_refusal(given)
        newer = _newer_step_note(tracker, step, steps[-1]) if chosen < steps[-1] else None
        return replace(paths, note="; ".join(filter(None, (paths.note, refusal, newer))) or None)
    return checkpoint_resolution.resolve_checkpoint(given, role=role)


def _tracked_step_not_complete(run: Path, step: int) -> str:
    """Why the step the tracker names is not read: its manifest when one is there but no
    regular file (a FIFO, a directory, a link to /dev/zero), named with what it is, as
    validating that step dir says; else missing or incomplete (a save stopped before its
    manifest was written, or the step removed)."""
    target = layout.step_dir(run, step)
    damage = run_steps.manifest_damage(target)
    if damage is None:
        return f"names step {step}, which is missing or incomplete"
    return f"names step {step}, but {target / layout.MANIFEST_FILE} is {damage}"


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
        and bool(run_steps.list_complete_steps(given))
    )


def _check_manifest(paths: layout.CheckpointPaths, report: ValidationReport) -> Manifest | None:
    if paths.manifest is None:
        return None  # bare dist_ckpt (Megatron-LM, verl): nothing to compare against
    try:
        manifest = read_manifest(paths.manifest)
    except ManifestError as err:
        report.add_error(paths.manifest, err)
        return None
    if paths.step is not None and manifest.step != paths.step:
        report.add(
            ERROR, paths.manifest, f"says step {manifest.step}, directory is step {paths.step}"
        )
    misnamed = misnamed_step(paths.step_dir, manifest.step)
    if misnamed is not None:
        report.add(ERROR, paths.manifest, misnamed)
    return manifest


def _check_trainer_step(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    manifest: Manifest | None,
    report: ValidationReport,
) -> None:
    """The step the trainer state records (mfsdp's, Megatron-LM's `iteration`,
    Megatron-Bridge's train_state.pt), which a resume continues from, against the step of
    the checkpoint's directory and of its manifest (`trainer_step`)."""
    known = {"its directory": paths.step, "its manifest": manifest.step if manifest else None}
    for where, problem in trainer_step_problems(paths, reader, known):
        report.add(ERROR, where, problem)


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
