"""`mfsdp ckpt validate`: every check a checkpoint must pass before anyone trusts it.

Each check appends `Finding`s naming the file or tensor and what is wrong; nothing here
raises for a bad checkpoint (a missing path is the caller's usage error). The cheap checks
(metadata, files, chunk coverage, bytes shared between entries, optimizer/model/config
agreement, tracker) always run; `deep=True` adds each file's digest against the manifest
(the algorithm its record names: xxh3_128, or sha256 in older manifests) and reading every
tensor (NaN/Inf counts).

Checkpoints verl and Megatron-LM write have no manifest: every check that needs none
still runs (coverage, each chunk inside its file, file sizes, values, shapes against the
HF config), the report says that hashes were not checked, and `strict` refuses them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from mfsdp_ckpt.check.printable import printable
from mfsdp_ckpt.convert.megatron_lora import stored_adapter_summary
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format import layout, state_keys
from mfsdp_ckpt.format.dcp_metadata import UnsafeMetadataError
from mfsdp_ckpt.format.file_hash import hash_file, rehash_like
from mfsdp_ckpt.format.hf_trainer import OPTIMIZER_ENTRY
from mfsdp_ckpt.format.manifest import Manifest, ManifestError, read_manifest
from mfsdp_ckpt.lora import ByteProgress, check_base_model
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import (
    MAX_LISTED_PROBLEMS,
    CheckpointFormatError,
    CheckpointReader,
    TensorEntry,
    chunk_backing_problem,
    chunk_coverage_problems,
    unclaimed_storage_entries,
)
from mfsdp_ckpt.storage.shared_bytes import byte_sharing

ERROR, WARNING = "error", "warning"
STRICT_NEEDS_MANIFEST = "no manifest.json: --strict requires one (file hashes cannot be checked)"
_HASH_MISMATCH = "{} differs from the manifest (bytes changed after save)"

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
) -> ValidationReport:
    """Validate any level of any layout `layout.resolve_checkpoint` knows (ours, verl,
    Megatron-LM, a bare dist_ckpt dir); `role` picks verl's actor or critic, `hf_config`
    supplies the config a checkpoint without huggingface/ lacks.

    `deep` reports two things as it goes: `progress` gets (tensors read, tensors) of the
    checkpoint, and on a LoRA checkpoint `base_progress` first gets (bytes hashed, bytes to
    hash) of the base model it adapts, which can be far larger than the adapter.

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
    )


def validate_paths(
    paths: layout.CheckpointPaths,
    report: ValidationReport | None = None,
    *,
    deep: bool = False,
    progress: Progress | None = None,
    hf_config: str | os.PathLike | None = None,
    base_progress: ByteProgress | None = None,
    reader: CheckpointReader | None = None,
) -> ValidationReport:
    """The checks of `validate_checkpoint` on an already resolved checkpoint (`reader`: one
    of its dist_ckpt the caller already holds)."""
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
    _check_shared_bytes(reader, report)
    _check_contents(paths, reader, roots, manifest, report)
    optimizer = _check_optimizer_dcp(paths, report)
    if optimizer is None:
        _check_optimizer(reader, roots, report)
    else:
        joint = _joint_tables(reader, optimizer)
        _check_optimizer(joint, state_keys.state_roots(joint.tensors), report)
    if (
        manifest is None or manifest.lora is None
    ):  # a LoRA step holds adapters, not the config's weights
        _check_against_config(paths, reader, roots, report, hf_config)
    check_base_model(
        manifest, report, deep=deep, source=str(paths.manifest), progress=base_progress
    )
    if deep:
        if manifest is not None:
            _check_hashes(paths, manifest, report)
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
            report.add(ERROR, tracker, f"names step {step}, which is missing or incomplete")
        if step is not None and steps and step < steps[-1]:
            report.add(WARNING, tracker, f"names step {step} but step {steps[-1]} is complete too")
        chosen = step if step in steps else (steps[-1] if steps else None)
        if chosen is None:
            raise layout.CheckpointPathError(
                f"{given}: no complete checkpoint step in this run dir"
            )
        paths = layout.resolve_checkpoint(layout.step_dir(given, chosen))
        layout.refuse_pieces_linked_out(given, paths)
        return paths
    return layout.resolve_checkpoint(given, role=role)


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
    for relative in present:
        if relative not in listed and relative != layout.MANIFEST_FILE:
            report.add(
                WARNING, paths.step_dir / relative, "not listed in the manifest (unknown file)"
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
    for entry in reader.tensors.values():
        where = f"{reader.root / layout.DCP_METADATA_FILE} [{entry.name}]"
        for problem in chunk_coverage_problems(entry):
            report.add(ERROR, where, problem)
        for chunk in entry.chunks:
            if chunk.numel and chunk.file is None:  # what a save that lost a file's writes leaves
                report.add(
                    ERROR,
                    where,
                    f"chunk at {chunk.offsets} has no storage entry (its bytes were never written)",
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


_TIED_PAIRS = (  # (output name, input name) a tied model saves twice but optimizes once
    ("lm_head.weight", "embed_tokens.weight"),
    ("output_layer.weight", "embedding.word_embeddings.weight"),
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


def _check_shared_bytes(reader: CheckpointReader, report: ValidationReport) -> None:
    """Two entries may name the same bytes only as an exact alias (a tied output layer
    stored once); a partial overlap or a blob read as two different things is an error."""
    where = reader.root / layout.DCP_METADATA_FILE
    for problem in byte_sharing(reader.tensors, reader.objects).problems:
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
    checked as any DCP is (metadata, data files, chunks, storage entries, shared bytes),
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
    for check in (_check_chunks, _check_storage_entries, _check_backing, _check_shared_bytes):
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


def _check_optimizer(
    reader: _TensorTables, roots: state_keys.StateRoots, report: ValidationReport
) -> None:
    """The optimizer's per-parameter tensors (Adam's moments, or SGD's momentum: whichever
    the checkpoint holds) must exist for every parameter and match its shape.

    States are matched to parameters by name with entries and wrapper segments removed,
    which covers FSDP2's `optimizer.state.<param>.exp_avg`, torch's DCP recipe's
    `app.optim.state.<param>.exp_avg` beside `app.model.<param>`, and Megatron's
    distributed optimizer, `optimizer.state.module.module.module.<param>.exp_avg` (SwiGLU
    fc1 split into weight_w/weight_v as in the model). A missing state is named by the key
    it would be stored under; a state that matches no parameter is a warning: an optimizer
    may legitimately hold more than the model state shows.
    """
    tensors = reader.tensors
    params = {roots.module_path(key): key for key in roots.weight_keys(tensors)}
    found: dict[str, dict[str, str]] = {}
    by_position: dict[str, dict[str, str]] = {}
    unmatched = []
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
            unmatched.append(key)
    if by_position and not found:
        _check_positional_states(tensors, params, by_position, report)
        return
    if not found and not unmatched:
        return
    moments = _moment_set({state for states in found.values() for state in states})
    lead = _optimizer_lead(roots, params, found)
    for name, key in params.items():
        states = found.get(name, {})
        for moment in moments:
            state_key = states.get(moment)
            if state_key is None:
                if not _is_tied_duplicate(name, params):
                    expected = _state_key(roots, key, states, moment, lead)
                    report.add(
                        ERROR, f"[{key}]", f"optimizer state {moment} is missing (no [{expected}])"
                    )
            elif tensors[state_key].shape != tensors[key].shape:
                report.add(
                    ERROR,
                    f"[{state_key}]",
                    f"shape {tensors[state_key].shape} differs from the parameter's"
                    f" {tensors[key].shape}",
                )
    if unmatched:
        more = f" (+{len(unmatched) - 1} more)" if len(unmatched) > 1 else ""
        report.add(
            WARNING, f"[{unmatched[0]}]", f"optimizer state matches no model parameter{more}"
        )


def _moment_set(held: set[str]) -> tuple[str, ...]:
    """The per-parameter tensors of the optimizer whose states are `held`: Adam's unless
    another optimizer's set is there (a state holding neither lost them)."""
    adam = state_keys.OPTIMIZER_MOMENTS[0]
    return next((m for m in state_keys.OPTIMIZER_MOMENTS if held.intersection(m)), adam)


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
    holds its optimizer's whole set of moments, each shaped like some parameter, and no
    more positions than parameters."""
    shapes = {tensors[key].shape for key in params.values()}
    moments = _moment_set({name for held in states.values() for name in held})
    for position in sorted(states, key=int):
        names = states[position]
        some = next(iter(names.values()))
        for moment in moments:
            key = names.get(moment)
            if key is None:
                expected = f"{some.rpartition('.')[0]}.{moment}"
                report.add(
                    ERROR, f"[{some}]", f"optimizer state {moment} is missing ([{expected}])"
                )
            elif tensors[key].shape not in shapes:
                report.add(ERROR, f"[{key}]", f"shape {tensors[key].shape} is no model parameter's")
    if len(states) > len(params):
        report.add(
            ERROR,
            f"[{next(iter(states[max(states, key=int)].values()))}]",
            f"{len(states)} parameters' optimizer states for the model's {len(params)}",
        )
    first = next(iter(states[min(states, key=int)].values()))
    report.add(
        WARNING,
        f"[{first}]",
        f"optimizer state of {len(states)} parameters keyed by position (torch's"
        " Optimizer.state_dict()), not by name: each is shaped like a parameter, but which"
        " parameter it belongs to is not recorded, so the pairing is not checked",
    )


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


def _is_tied_duplicate(name: str, params: dict[str, str]) -> bool:
    """A tied output layer is saved twice in the model state but once in the optimizer's."""
    return any(
        name.endswith(out) and any(p.endswith(inp) for p in params) for out, inp in _TIED_PAIRS
    )


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


def _check_config_against_record(
    paths, reader: CheckpointReader, report: ValidationReport, config_file: Path, root
) -> None:
    """A config.json that contradicts the model the checkpoint's own record describes
    (Bridge's run_config.yaml, Megatron-LM's args) gives tensors of the same shapes a wrong
    q/k/v split or cut vocabulary: export refuses it, so validate must not pass it."""
    from mfsdp_ckpt.convert.hf_config import read_config_json
    from mfsdp_ckpt.convert.record_agreement import contradiction

    found = contradiction(read_config_json(config_file, root)[1], paths, reader)
    if found is not None:
        report.add(ERROR, config_file, found)


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
    lacks the sizes leaves the check out: the checkpoint is not damaged by it. One that
    cannot be read (a pickle naming os.system, bad YAML) is an error."""
    from mfsdp_ckpt.convert.export_source import json_config
    from mfsdp_ckpt.convert.hf_config import HFConfigError
    from mfsdp_ckpt.convert.megatron_config import (
        MegatronConfigError,
        MegatronSettingsMissing,
        recorded_config,
    )

    try:
        derived = recorded_config(paths, reader)
    except (MegatronConfigError, MegatronSettingsMissing):
        return
    except (CheckpointFormatError, CheckpointFileError) as err:
        where, _, message = str(err).partition(": ")
        report.add(ERROR, where, message or str(err))
        return
    if derived is None:
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
        plan = plan_export(source, config_of(), drop_mtp=True)
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
                f"{plan.mtp.summary()} not checked against {where}, whose model has none;"
                f" export-hf refuses them unless {DROP_MTP_FLAG} leaves them out",
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


def _check_hashes(paths, manifest: Manifest, report: ValidationReport) -> None:
    report.hash_algorithms = sorted({record.algorithm for record in manifest.files.values()})
    for name, record in sorted(manifest.files.items()):
        file = paths.step_dir / name
        found = layout.stat_inside(file)
        if found is None or not stat.S_ISREG(found.st_mode) or found.st_size != record.size:
            continue  # reported by _check_files
        try:
            if hash_file(file, paths.step_dir, record.algorithm) != record:
                report.add(ERROR, file, _HASH_MISMATCH.format(record.algorithm))
        except CheckpointFileError as err:  # a link out of the step or a special file: never read
            report.add(ERROR, file, str(err).split(": ", 1)[-1])


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
    import torch

    entries = list(reader.tensors.values())
    missing = _missing_files(reader)
    unread: dict[str, list[str]] = {}  # a data file reported missing -> the tensors in it
    for done, entry in enumerate(entries, 1):
        where = f"[{entry.name}]"
        gone = next((c.file for c in entry.chunks if c.file in missing), None)
        if gone is not None:  # said once for its file, not once per tensor
            unread.setdefault(gone, []).append(entry.name)
        elif not chunk_coverage_problems(entry):
            try:
                tensor = reader.read_tensor(entry.name)
            except (CheckpointFormatError, CheckpointFileError) as err:
                report.add(ERROR, where, str(err))
            else:
                if tensor.is_floating_point():
                    nans = int(torch.isnan(tensor).sum())
                    infs = int(torch.isinf(tensor).sum())
                    if nans or infs:
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
