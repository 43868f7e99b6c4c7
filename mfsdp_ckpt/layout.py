"""The one place that decides where a checkpoint's files live on disk.

A run directory holds one sub-directory per saved step plus a tracker file::

    <run_dir>/
        latest_checkpointed_iteration.txt   # newest *complete* step (verl's name)
        global_step_<N>/
            dist_ckpt/        # torch.distributed.checkpoint: .metadata + __<rank>_<i>.distcp
            huggingface/      # config.json, tokenizer files, generation_config.json
            manifest.json     # written last: its presence marks the step complete

Everything else in mfsdp (the saver, the reader, validate, export) asks this module for
paths, so the layout can change in exactly one place.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

TRACKER_FILE = "latest_checkpointed_iteration.txt"
STEP_DIR_PREFIX = "global_step_"
DIST_CKPT_DIR = "dist_ckpt"
HF_ASSETS_DIR = "huggingface"
MANIFEST_FILE = "manifest.json"
DCP_METADATA_FILE = ".metadata"
TMP_STEP_SUFFIX = ".tmp"

_STEP_DIR_RE = re.compile(rf"^{STEP_DIR_PREFIX}(\d+)$")


class CheckpointPathError(ValueError):
    """A path given by the user does not name a checkpoint; the message says why."""


def step_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / f"{STEP_DIR_PREFIX}{step}"


def tmp_step_dir(run_dir: str | os.PathLike, step: int) -> Path:
    """Sibling of the final step dir; a save is built here and renamed when complete."""
    return Path(run_dir) / f"{STEP_DIR_PREFIX}{step}{TMP_STEP_SUFFIX}"


def parse_step_dir_name(name: str) -> int | None:
    match = _STEP_DIR_RE.match(name)
    return int(match.group(1)) if match else None


def list_complete_steps(run_dir: str | os.PathLike) -> list[int]:
    """Steps whose directory holds a manifest, ascending. Temporary dirs never count."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    steps = []
    for child in run.iterdir():
        step = parse_step_dir_name(child.name)
        if step is not None and (child / MANIFEST_FILE).is_file():
            steps.append(step)
    return sorted(steps)


def read_tracker(run_dir: str | os.PathLike) -> int | None:
    """The step named by the tracker, or None when there is no tracker yet."""
    tracker = Path(run_dir) / TRACKER_FILE
    if not tracker.exists():
        return None
    text = tracker.read_text().strip()
    if not text.isdigit():
        raise CheckpointPathError(f"{tracker}: expected a step number, found {text[:40]!r}")
    return int(text)


def write_tracker(run_dir: str | os.PathLike, step: int) -> None:
    """Replace the tracker atomically: readers see the old step or the new one, never neither."""
    run = Path(run_dir)
    tmp = run / f".{TRACKER_FILE}.{os.getpid()}.tmp"
    with open(tmp, "w") as handle:
        handle.write(f"{step}\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, run / TRACKER_FILE)
    fsync_path(run)


def replace_dir(new: Path, target: Path) -> None:
    """Rename a finished directory onto `target`; an existing one is removed only after the
    new one is in place, so at every instant one whole version exists. On Linux the two are
    swapped in one `renameat2(RENAME_EXCHANGE)` and a missing target is created with
    `RENAME_NOREPLACE`, so no instant shows neither and nothing appearing meanwhile is
    replaced; elsewhere the old one is moved aside first."""
    from mfsdp_ckpt.out_dir import exchange, rename_noreplace

    if not target.exists() and not target.is_symlink():
        rename_noreplace(new, target)
    elif target.is_dir() and not target.is_symlink() and exchange(new, target):
        shutil.rmtree(new)  # it holds the old version now
    else:
        aside = target.with_name(f".{target.name}.old-{os.getpid()}")
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(target, aside)
        os.rename(new, target)
        if aside.is_symlink():
            aside.unlink()
        else:
            shutil.rmtree(aside)
    fsync_path(target.parent)


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file, or a directory's entries (POSIX needs that for a rename to be durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class CheckpointPaths:
    """Where one checkpoint's pieces are; `step_dir` is None for a bare dist_ckpt dir."""

    dist_ckpt: Path
    step_dir: Path | None = None
    run_dir: Path | None = None

    @property
    def manifest(self) -> Path | None:
        return self.step_dir / MANIFEST_FILE if self.step_dir else None

    @property
    def hf_assets(self) -> Path | None:
        return self.step_dir / HF_ASSETS_DIR if self.step_dir else None

    @property
    def step(self) -> int | None:
        return parse_step_dir_name(self.step_dir.name) if self.step_dir else None


def resolve_checkpoint(path: str | os.PathLike) -> CheckpointPaths:
    """Accept a run dir (follows the tracker), a step dir, or a bare dist_ckpt dir.

    Bare dist_ckpt dirs are what Megatron-LM, Megatron-Bridge and verl write: a DCP
    directory with `.metadata` and no manifest around it.
    """
    given = Path(path)
    if not given.exists():
        raise CheckpointPathError(f"{given}: no such file or directory")
    if not given.is_dir():
        raise CheckpointPathError(f"{given}: not a directory (give a run, step or dist_ckpt dir)")
    if (given / DCP_METADATA_FILE).is_file():
        parent = given.parent
        if given.name == DIST_CKPT_DIR and parse_step_dir_name(parent.name) is not None:
            return CheckpointPaths(dist_ckpt=given, step_dir=parent, run_dir=parent.parent)
        return CheckpointPaths(dist_ckpt=given)
    if (given / DIST_CKPT_DIR).is_dir():
        run_dir = given.parent if parse_step_dir_name(given.name) is not None else None
        return CheckpointPaths(dist_ckpt=given / DIST_CKPT_DIR, step_dir=given, run_dir=run_dir)
    if (given / TRACKER_FILE).exists():
        step = read_tracker(given)
        target = step_dir(given, step)
        if not (target / MANIFEST_FILE).is_file():
            raise CheckpointPathError(
                f"{given / TRACKER_FILE}: names step {step}, but {target} is missing or incomplete"
            )
        return CheckpointPaths(dist_ckpt=target / DIST_CKPT_DIR, step_dir=target, run_dir=given)
    steps = list_complete_steps(given)
    if steps:
        target = step_dir(given, steps[-1])
        return CheckpointPaths(dist_ckpt=target / DIST_CKPT_DIR, step_dir=target, run_dir=given)
    raise CheckpointPathError(
        f"{given}: not a checkpoint (no {DCP_METADATA_FILE}, no {DIST_CKPT_DIR}/, no {TRACKER_FILE})"
    )
