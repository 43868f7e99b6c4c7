"""Save and resume training state as DTensor checkpoints, atomically.

The save protocol, designed so that a crash at any instant leaves the previous step and
the tracker valid:

1. rank 0 clears a stale `global_step_N.tmp/` and every rank writes DCP files into it;
2. each rank fsyncs the files it wrote (hashed as they were written, `dcp_writer.py`);
   the hashes are gathered on rank 0;
3. rank 0 writes `huggingface/` assets, then `manifest.json` last, fsyncs, and renames
   `global_step_N.tmp` to `global_step_N` (a step dir without a manifest never counts);
4. rank 0 replaces the tracker with `os.replace`, then prunes old steps (`keep_last`,
   `retention.py`: never through a symlink; a step is renamed aside before it is deleted,
   so a kill meanwhile leaves no step dir; a step it cannot remove is a warning).

With `async_save=True` only the copy to host memory (`staging.py`) happens in the training loop; DCP
writing and steps 2-4 run in a background thread on a dedicated gloo group, and the next save (or
`close()`) waits for it. Policy (which step, what to keep) lives here; what the bytes of a DCP file
mean lives in `reader.py`; where files go lives in `layout.py`; what a failed save or load says
lives in `checkpoint_failures.py`; where crash tests kill a rank mid-save lives in `kill_points.py`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.stateful import Stateful

from mfsdp_ckpt import __version__
from mfsdp_ckpt.check.model_record_crcs import model_record_crcs
from mfsdp_ckpt.check.validate import invalid_checkpoint, manifest_hash_errors, require_valid
from mfsdp_ckpt.checkpoint_failures import (
    CheckpointSaveError,
    load_failure,
    raised_by_every_rank,
    save_failure,
    tracker_failure,
)
from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.format import checkpoint_resolution, layout, step_saving
from mfsdp_ckpt.format.file_hash import FileRecord, hash_files
from mfsdp_ckpt.format.manifest import CONTENT_KINDS, Manifest, read_manifest
from mfsdp_ckpt.kill_points import kill_point, kill_targets, maybe_die
from mfsdp_ckpt.retention import prune_steps
from mfsdp_ckpt.storage.dcp_writer import CheckedWriter
from mfsdp_ckpt.storage.gathered_files import unseen_files_line
from mfsdp_ckpt.storage.named_writes import write_bytes, writing
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.safe_dcp import SafeFileSystemReader, SafeLoadPlanner
from mfsdp_ckpt.storage.staging import HostStager
from mfsdp_ckpt.storage.writable import require_writable_dir

log = logging.getLogger(__name__)  # INFO: what each save and load cost (`mfsdp -v ...`)

MODEL, OPTIMIZER, EXTRA = CONTENT_KINDS


def _manifest_fields(states: Mapping[str, Any]) -> dict[str, Any]:
    """Optional manifest fields a state describes itself with: a state may have
    `manifest_fields() -> dict` (a LoRA adapter names its base model and PEFT config).
    Called on rank 0 when the manifest is written, so costly work (hashing a base model)
    runs once, off the other ranks, and in the background with async saves."""
    fields: dict[str, Any] = {}
    for state in states.values():
        describe = getattr(state, "manifest_fields", None)
        if describe is not None:
            fields.update(describe())
    return fields


@dataclass(frozen=True)
class _PendingSave:
    """What a save needs after its tensor files are written (possibly in a background
    thread): where the temp dir is, what the manifest records, when the save started."""

    step: int
    tmp: Path
    contents: tuple[str, ...]
    hf_assets: Callable[[Path], None] | None
    info: dict[str, Any]
    started: float
    states: Mapping[str, Any]


class CheckpointContentsError(MfsdpUsageError, ValueError):
    """save_contents / load_contents ask for something impossible or absent."""


def check_contents(contents: Iterable[str], what: str) -> tuple[str, ...]:
    """Validate a contents list; optimizer state is keyed by parameters, so it needs the model."""
    contents = tuple(contents)
    unknown = [c for c in contents if c not in CONTENT_KINDS]
    if unknown:
        raise CheckpointContentsError(
            f"{what}: unknown item(s) {unknown}; choose from {list(CONTENT_KINDS)}"
        )
    if OPTIMIZER in contents and MODEL not in contents:
        raise CheckpointContentsError(
            f"{what}: 'optimizer' needs 'model' too (optimizer state is keyed by the model's "
            "parameters)"
        )
    if not contents:
        raise CheckpointContentsError(f"{what}: nothing to save or load")
    return contents


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _versions() -> dict[str, str]:
    versions = {"torch": torch.__version__, "mfsdp": __version__}
    for package in ("transformers", "megatron_fsdp"):
        with contextlib.suppress(Exception):  # not installed: nothing to record
            versions[package] = __import__(package).__version__
    return versions


class Checkpointer:
    """One run directory's checkpoints: save (sync or async), find the resume point, load."""

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        strategy: str,
        keep_last: int | None = None,
        async_save: bool = False,
        model_family: str | None = None,
        hash_workers: int = 4,
        io_threads: int = 4,
    ):
        if keep_last is not None and keep_last < 1:
            raise ValueError(f"keep_last must be >= 1 or None, got {keep_last}")
        kill_point()  # a misspelt crash-test hook fails here, before any training
        self.run_dir = Path(run_dir)
        self.strategy = strategy
        self.keep_last = keep_last
        self.async_save = async_save
        self.model_family = model_family
        self.hash_workers = hash_workers
        self.io_threads = io_threads
        # A separate gloo group lets background finalization talk while training uses NCCL.
        self._group = dist.new_group(backend="gloo") if dist.is_initialized() else None
        self._stager = HostStager()
        self._pending: threading.Thread | None = None
        self._pending_error: BaseException | None = None
        self._pending_done = threading.Event()  # set as the thread `_pending` ends
        if _rank() == 0:  # a dangling link or a file on its path: one line naming it
            require_writable_dir("run_dir", self.run_dir)
            self.run_dir.mkdir(parents=True, exist_ok=True)

    # ----------------------------------------------------------------- save
    def save(
        self,
        step: int,
        states: Mapping[str, Stateful | dict[str, Any]],
        *,
        contents: Iterable[str] = CONTENT_KINDS,
        hf_assets: Callable[[Path], None] | None = None,
        info: dict[str, Any] | None = None,
    ) -> Path:
        """Save `states[kind]` for each kind in contents as step `step`; returns the step dir.

        `hf_assets(dir)` runs on rank 0 to write config/tokenizer files into huggingface/.
        """
        contents = check_contents(contents, "save_contents")
        missing = [kind for kind in contents if kind not in states]
        if missing:
            raise CheckpointContentsError(
                f"save_contents asks for {missing} but no state was given"
            )
        self.wait()
        pending = _PendingSave(
            step,
            layout.tmp_step_dir(self.run_dir, step),
            contents,
            hf_assets,
            info or {},
            time.monotonic(),
            states,
        )
        try:
            self._start(pending)
        except BaseException as err:  # Ctrl-C while the temp dir was made or staged
            if _rank() == 0 and self._pending is None:  # not yet handed to the thread
                shutil.rmtree(pending.tmp, ignore_errors=True)
            raise save_failure(err, pending.tmp, pending.step) from None
        return layout.step_dir(self.run_dir, step)

    def _start(self, pending: _PendingSave) -> None:
        """Make the temp dir and write into it, or (`async_save`) stage the state to host
        memory and leave the writing to a background thread."""
        step, tmp = pending.step, pending.tmp
        if _rank() == 0:
            if tmp.exists():
                shutil.rmtree(tmp)
            (tmp / layout.DIST_CKPT_DIR).mkdir(parents=True)
        self._barrier()
        maybe_die("before_files", step, _rank())
        state_dict = {kind: _state_of(pending.states[kind]) for kind in pending.contents}
        writer = CheckedWriter(
            str(tmp / layout.DIST_CKPT_DIR),
            thread_count=self.io_threads,
            kill_mid_file=kill_targets("mid_file", step, _rank()),
        )
        if self.async_save:
            staged = self._stager.stage(
                state_dict, copy_host_tensors=True
            )  # the only part training waits for
            log.info(
                "step %d: staged to host memory in %.2f s; writing in the background",
                step,
                time.monotonic() - pending.started,
            )
            thread = threading.Thread(
                target=self._save_in_background, args=(staged, writer, pending), daemon=False
            )
            self._pending_done.clear()
            # published once started: a thread that cannot start (a pids limit) raises here,
            # where one left as `_pending` would be waited for forever by `settle`
            thread.start()
            self._pending = thread
        else:
            # GPU shards go to host first, in one pass of non-blocking copies: DCP's writer
            # threads would otherwise copy tensor by tensor, each copy a CUDA sync.
            self._write(self._stager.stage(state_dict, copy_host_tensors=False), writer, pending)

    def _write(self, state_dict: dict, writer: CheckedWriter, pending: _PendingSave) -> None:
        """DCP files, then hashes, manifest, rename, tracker. A failure (disk full, a dead
        peer, a tokenizer's own error writing huggingface/) becomes one CheckpointSaveError
        naming the temp dir and the step; the temp dir is removed to give the space back
        (on Ctrl-C too), and the previous step and the tracker are untouched."""
        step, tmp = pending.step, pending.tmp
        try:
            dcp.save(state_dict, storage_writer=writer, process_group=self._group)
            log.info(
                "step %d: tensor files written in %.2f s", step, time.monotonic() - pending.started
            )
            self._finish(pending, hashed=writer.hashed_while_written())
        except BaseException as err:
            if _rank() == 0:
                shutil.rmtree(tmp, ignore_errors=True)
            raise save_failure(err, pending.tmp, pending.step) from None

    def wait(self) -> None:
        """Block until an async save in flight is committed; re-raise its failure here."""
        if self._pending is not None:
            self._await_pending(self._pending)
            self._pending = None
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise error

    def settle(self) -> None:
        """On the way out of a run that failed or was interrupted: let an async save in
        flight finish (its commit, tracker and prune need the process group and the run
        dir's lock, both released right after) and drop its outcome, so that the run's own
        error is the one reported. A second Ctrl-C meanwhile is deferred until it is done."""
        if self._pending is None:
            return
        from mfsdp_ckpt.storage.out_lock import ctrl_c_deferred

        with ctrl_c_deferred():
            self._await_pending(self._pending)
        self._pending, self._pending_error = None, None

    def _await_pending(self, thread: threading.Thread) -> None:
        """Wait until the save in flight has ended. Its thread sets `_pending_done` as it
        ends, which is waited on before the join: a Ctrl-C landing in `Thread.join` (Python
        before 3.13) marks a thread still running as stopped, so the join in `settle`
        returned at once and the run exited mid-save, leaving `global_step_N.tmp/` behind."""
        self._pending_done.wait()
        thread.join()

    def close(self) -> None:
        self.wait()

    def _save_in_background(
        self, staged: dict, writer: CheckedWriter, pending: _PendingSave
    ) -> None:
        try:
            self._write(staged, writer, pending)
        except BaseException as err:  # surfaced by wait() in the training thread
            self._pending_error = err  # a CheckpointSaveError naming the step (`_write`)
        finally:
            self._pending_done.set()

    def _finish(self, pending: _PendingSave, hashed: dict[str, FileRecord]) -> None:
        """`hashed`: records of files hashed while written (by file name); the others are
        read back and hashed here."""
        step, tmp = pending.step, pending.tmp
        dcp_dir = tmp / layout.DIST_CKPT_DIR
        maybe_die("after_files", step, _rank())
        own = sorted(
            f"{layout.DIST_CKPT_DIR}/{name}"
            for name in os.listdir(dcp_dir)
            if name.startswith(f"__{_rank()}_")
        )
        records, unhashed = {}, []
        for name in own:
            step_saving.fsync_path(tmp / name)
            known = hashed.get(Path(name).name)
            if known is not None and known.size == (tmp / name).stat().st_size:
                records[name] = known
            else:
                unhashed.append(name)
        records.update(hash_files(tmp, unhashed, self.hash_workers))
        gathered: list[Any] | None = [None] * _world_size() if _rank() == 0 else None
        if dist.is_initialized():
            dist.gather_object(records, gathered, dst=0, group=self._group)
        else:
            gathered = [records]
        self._refuse_unseen_files(pending, gathered)
        if gathered is not None:  # rank 0: every rank's records
            self._commit(pending, gathered, _manifest_fields(pending.states))
        self._barrier()

    def _refuse_unseen_files(self, pending: _PendingSave, gathered: list[Any] | None) -> None:
        """Fail the save on every rank, before rank 0 writes a manifest, when rank 0's temp
        dir lacks a file another rank wrote (`gathered_files`: a run dir on each machine's
        own disk); the previous step and the tracker stay as they were."""
        unseen = None if gathered is None else unseen_files_line(pending.tmp, gathered)
        verdict = [unseen and f"{pending.tmp}: saving step {pending.step} failed: {unseen}"]
        if dist.is_initialized() and _world_size() > 1:  # rank 0's temp dir, named alike
            dist.broadcast_object_list(verdict, src=0, group=self._group)
        if verdict[0] is not None:
            failure = CheckpointSaveError(verdict[0])
            failure.every_rank = True  # every rank raises it alike
            raise failure

    def _commit(
        self,
        pending: _PendingSave,
        gathered: list[dict[str, FileRecord]],
        fields: dict[str, Any],
    ) -> None:
        """Rank 0: hash the last files, write the manifest, rename the step into place and
        point the tracker at it."""
        step, tmp, hf_assets = pending.step, pending.tmp, pending.hf_assets
        files = {}
        for part in gathered:
            files.update(part)
        if hf_assets is not None:
            hf_dir = tmp / layout.HF_ASSETS_DIR
            hf_dir.mkdir(exist_ok=True)
            with writing(hf_dir):  # a library's error naming no file names the file it wrote
                hf_assets(hf_dir)
        extra_names = [f"{layout.DIST_CKPT_DIR}/{layout.DCP_METADATA_FILE}"]
        extra_names += [
            str(p.relative_to(tmp))
            for p in sorted((tmp / layout.HF_ASSETS_DIR).rglob("*"))
            if p.is_file()
        ]
        for name in extra_names:
            step_saving.fsync_path(tmp / name)
        files.update(hash_files(tmp, extra_names, self.hash_workers))
        # what an export, which hashes no whole file, compares the records it reads with
        records = (
            model_record_crcs(tmp / layout.DIST_CKPT_DIR) if MODEL in pending.contents else None
        )
        maybe_die("before_manifest", step, _rank())
        manifest = Manifest(
            step=step,
            world_size=_world_size(),
            strategy=self.strategy,
            contents=list(pending.contents),
            files=dict(sorted(files.items())),
            model_family=self.model_family,
            versions=_versions(),
            created_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            save_seconds=round(time.monotonic() - pending.started, 3),
            info=pending.info,
            model_records=records,
            **fields,
        )
        manifest_path = tmp / layout.MANIFEST_FILE
        write_bytes(manifest_path, manifest.to_json().encode(), durable=True)
        for directory in (tmp / layout.DIST_CKPT_DIR, tmp):
            step_saving.fsync_path(directory)
        maybe_die("after_manifest", step, _rank())
        left = step_saving.replace_dir(tmp, layout.step_dir(self.run_dir, step))  # replaced whole
        if left is not None:
            log.warning("%s", left)
        maybe_die("after_rename", step, _rank())
        self._point_tracker_at(step)
        size = sum(record.size for record in files.values())
        log.info(
            "step %d: committed %s (%d files, %.1f MiB) %.2f s after the save began",
            step,
            layout.step_dir(self.run_dir, step),
            len(files),
            size / 2**20,
            time.monotonic() - pending.started,
        )
        self._prune(step)

    def _point_tracker_at(self, step: int) -> None:
        """Replace the tracker; when that fails (disk full) the step is saved all the same,
        so say that, and which step `checkpoint.resume=auto` takes now."""
        try:
            step_saving.write_tracker(self.run_dir, step)  # removes its temp file on failure
        except OSError as err:
            raise tracker_failure(self.run_dir, step, err) from None

    def _prune(self, newest: int) -> None:
        """Remove what `retention.prune_steps` says; step `newest` is committed already, so
        what cannot be removed is a warning line, never a failed save (it failed rank 0
        alone, and the other ranks lost contact in the barrier after the commit)."""
        for line in prune_steps(self.run_dir, newest, self.keep_last):
            log.warning("%s", line)

    def _barrier(self) -> None:
        if dist.is_initialized():
            dist.barrier(group=self._group)

    # ----------------------------------------------------------------- load
    def find_resume(self, resume: str) -> layout.CheckpointPaths | None:
        """`find_resume` in this checkpointer's run_dir."""
        return find_resume(self.run_dir, resume)

    def load(
        self,
        paths: layout.CheckpointPaths,
        states: Mapping[str, Stateful | dict[str, Any]],
        *,
        contents: Iterable[str] = CONTENT_KINDS,
    ) -> Manifest | None:
        return load_checkpoint(paths, states, contents=contents, group=self._group)


def find_resume(run_dir: Path, resume: str) -> layout.CheckpointPaths | None:
    """`checkpoint_resolution.checkpoint_to_resume` in `run_dir`; one of another trainer's
    layout refused (`refuse_foreign_training_state`). A function of the run dir alone, so a
    runner looks the step up before it makes its checkpointer or builds a model."""
    found = checkpoint_resolution.checkpoint_to_resume(run_dir, resume)
    if found is not None:
        refuse_foreign_training_state(found, CONTENT_KINDS)
    return found


def load_checkpoint(
    paths: layout.CheckpointPaths,
    states: Mapping[str, Stateful | dict[str, Any]],
    *,
    contents: Iterable[str] = CONTENT_KINDS,
    group: dist.ProcessGroup | None = None,
) -> Manifest | None:
    """Load `contents` from a checkpoint into `states`, resharding to the current world size.

    The checkpoint is validated first (cheap checks, and the digests of the manifest's files
    with the hashing split over the ranks of `group`): a damaged or hostile checkpoint is
    refused with CheckpointInvalidError before DCP reads a byte. Model and optimizer keys
    must match both ways, with equal shapes (a checkpoint of another model is refused, not
    partially loaded); `extra` keys absent from the checkpoint (per-rank RNG of ranks that
    did not exist then) are left as they are.
    """
    contents = check_contents(contents, "load_contents")
    started = time.monotonic()
    with raised_by_every_rank():  # every rank checks the same files alike before DCP reads
        manifest, reader, stored, wanted = _checked_for_load(paths, states, contents, group)
    try:
        dcp.load(wanted, storage_reader=reader, planner=SafeLoadPlanner(allow_partial_load=True))
    except CheckpointException as err:  # a BaseException carrying every rank's traceback
        raise load_failure(err, paths.dist_ckpt, stored) from None
    for kind in contents:
        target = states[kind]
        if hasattr(target, "load_state_dict"):
            target.load_state_dict(wanted[kind])
        else:
            target.update(wanted[kind])
    log.info(
        "%s: loaded %s in %.2f s", paths.dist_ckpt, ", ".join(contents), time.monotonic() - started
    )
    return manifest


def _checked_for_load(
    paths: layout.CheckpointPaths,
    states: Mapping[str, Stateful | dict[str, Any]],
    contents: tuple[str, ...],
    group: dist.ProcessGroup | None,
) -> tuple[Manifest | None, SafeFileSystemReader, Mapping[str, Any], dict[str, Any]]:
    """The checks `load_checkpoint` makes before DCP reads a byte (the checkpoint valid, its
    contents and keys this run's), then (manifest, reader, stored metadata, the state dicts
    to load into, without the `extra` keys the checkpoint lacks)."""
    started = time.monotonic()
    verify_before_load(paths, group)
    log.info("%s: verified in %.2f s", paths.dist_ckpt, time.monotonic() - started)
    manifest = read_manifest(paths.manifest) if paths.manifest else None
    if manifest is not None:
        refuse_absent_contents(paths, manifest, contents)
    for kind in contents:  # a state may refuse a checkpoint it cannot continue (LoRA: another base)
        check = getattr(states[kind], "check_manifest", None)
        if check is not None:
            check(manifest, paths)
    reader = SafeFileSystemReader(str(paths.dist_ckpt))
    stored = reader.read_metadata().state_dict_metadata
    refuse_foreign_training_state(paths, contents, stored)
    wanted = {kind: _state_of(states[kind]) for kind in contents}
    flat, mapping = flatten_state_dict(wanted)
    check_same_state(
        paths.dist_ckpt, stored, flat, [kind for kind in contents if kind != EXTRA], group
    )
    for key in [k for k in flat if k.startswith(f"{EXTRA}.") and k not in stored]:
        _drop_path(wanted, mapping[key])
    return manifest, reader, stored, wanted


def refuse_absent_contents(
    paths: layout.CheckpointPaths, manifest: Manifest, contents: Iterable[str]
) -> None:
    """CheckpointContentsError (one line) when the checkpoint's manifest records none of a
    kind in `contents`: read from the manifest alone, so a resume checks it before building
    a model (`trainer.resume.resume_target`) as well as before the load."""
    absent = [kind for kind in contents if kind not in manifest.contents]
    if not absent:
        return
    weights_only = manifest.contents == ["model"]  # an import, or a weights-only save
    start = (
        "; it holds weights alone: to start training from them, give its step dir as"
        " model.path and a new trainer.run_dir"
        if weights_only
        else ""
    )
    raise CheckpointContentsError(
        f"{paths.manifest}: checkpoint holds {manifest.contents}, not {absent}{start}"
    )


def refuse_foreign_training_state(
    paths: layout.CheckpointPaths,
    contents: Iterable[str],
    stored: Mapping[str, Any] | None = None,
) -> None:
    """CheckpointContentsError (one line) when `contents` asks for training state beside the
    weights (a resume) from a checkpoint that cannot hold mfsdp's: one of another trainer's
    layout (verl, Megatron-LM, Megatron-Bridge, ...), or a bare dist_ckpt whose `stored`
    keys hold none of a kind asked for (an import, Megatron-LM's --load dir). Its keys were
    compared with the run's, which said "another model config? a new trainer.run_dir starts
    over" in a new run dir of the same model; its weights are what a run starts from."""
    asked = [kind for kind in contents if kind != MODEL]
    if not asked or paths.kind == layout.MFSDP:
        return
    if paths.kind == layout.BARE_DCP:
        if stored is None:  # ours copied out of its step dir, or another's: told by its keys
            return
        held = {key.split(".", 1)[0] for key in stored}
        if all(kind in held for kind in contents):
            return
    where = paths.step_dir or paths.dist_ckpt
    what = "without manifest.json" if paths.kind == layout.BARE_DCP else f"of layout {paths.kind}"
    raise CheckpointContentsError(
        f"{where}: a checkpoint {what}, not a step of an mfsdp training run: it has no"
        f" mfsdp {' or '.join(asked)} state to resume; to start training from its weights,"
        f" give model.path={where} instead of checkpoint.resume"
    )


_ANOTHER_MODEL = " (another model config? a new trainer.run_dir starts over)"


def check_same_state(
    where: Path,
    stored: Mapping[str, Any],
    flat: Mapping[str, Any],
    kinds: list[str],
    group: dist.ProcessGroup | None = None,
) -> None:
    """CheckpointContentsError (one line) unless, for each kind, the checkpoint's keys and
    the run's are the same set and every tensor has the same global shape. Loading with
    keys left over on either side would resume a different model without a word (a layer
    dropped, a later save missing tensors). The run's keys are those of all ranks together:
    Adam keeps no state for a rank's empty shard, so one rank alone may lack a key."""
    prefixes = tuple(f"{kind}." for kind in kinds)
    wanted = {key for key in flat if key.startswith(prefixes)}
    held = set(wanted)
    if dist.is_initialized() and dist.get_world_size(group) > 1:  # before any rank may raise
        every_rank: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(every_rank, sorted(wanted), group=group)
        held = held.union(*every_rank)
    missing = sorted(wanted - set(stored))
    if missing:
        raise CheckpointContentsError(
            f"{where}: {len(missing)} key(s) of this run missing from the checkpoint,"
            f" e.g. {missing[:3]}{_ANOTHER_MODEL}"
        )
    unexpected = sorted(key for key in stored if key.startswith(prefixes) and key not in held)
    if unexpected:
        raise CheckpointContentsError(
            f"{where}: {len(unexpected)} key(s) of the checkpoint this run does not have,"
            f" e.g. {unexpected[:3]}{_ANOTHER_MODEL}"
        )
    for key in sorted(wanted):
        value = flat[key]
        stored_shape = getattr(stored[key], "size", None)
        if not isinstance(value, torch.Tensor) or stored_shape is None:
            continue
        shape = value.shape
        if tuple(shape) != tuple(stored_shape):
            raise CheckpointContentsError(
                f"{where}: {key} has shape {tuple(stored_shape)} in the checkpoint,"
                f" {tuple(shape)} in this run{_ANOTHER_MODEL}"
            )


def verify_before_load(
    paths: layout.CheckpointPaths,
    group: dist.ProcessGroup | None = None,
    reader: CheckpointReader | None = None,
) -> None:
    """Every rank runs the cheap checks (same files, same verdict) and hashes its share of
    the files; the ranks agree on the outcome so that none enters DCP's collectives alone.
    A resume and a run started from a step's weights (`model.path=STEP`) check alike: the
    per-record CRCs those reads check pass a data file of another step. Every rank of
    `group` calls it; `reader`: the caller's own of `paths.dist_ckpt` (parsed once)."""
    require_valid(paths, manifest_only=True, reader=reader)
    rank, world = (
        (dist.get_rank(group), dist.get_world_size(group)) if dist.is_initialized() else (0, 1)
    )
    errors = manifest_hash_errors(paths, rank, world)
    if world > 1:
        gathered: list[list[str] | None] = [None] * world
        dist.all_gather_object(gathered, errors, group=group)
        errors = [line for part in gathered for line in part or []]
    if errors:
        raise invalid_checkpoint(sorted(errors), paths.step_dir or paths.dist_ckpt)


def _state_of(state: Stateful | dict[str, Any]) -> dict[str, Any]:
    return state.state_dict() if hasattr(state, "state_dict") else state


def _drop_path(tree: dict[str, Any], path: tuple) -> None:
    node: Any = tree
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
