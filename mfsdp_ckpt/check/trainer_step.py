"""The step a checkpoint's trainer state records, checked against the step it is at.

Where mfsdp wrote a checkpoint, its step is known three ways: its directory's name
(`global_step_N`), its manifest and its trainer state (the DCP entry `extra.step`, which a
resume continues from). The first two were compared; the third was read by nothing but a
resume, so a `global_step_2` whose trainer state said step -5 passed `validate --deep
--strict` and then resumed "steps -5 -> 3", its metrics and config history overwritten.

Megatron's checkpoints have the same split: the step shown is the iteration dir's
(`iter_0000100`), while Megatron-LM resumes from the DCP's `iteration` entry
(megatron/training/checkpointing.py: `state_dict['iteration']`, unless `--finetune` or a
release) and Megatron-Bridge from the iteration dir's `train_state.pt` `step` (its
`iteration` entry when there is no train_state.pt). An `iter_0000100/` whose `iteration`
said 50 was reported as step 100 and resumed at 50.

Validate reads each such record (small, bounded, through the restricted loaders: never
code) and reports a value that is no step, or disagrees with the step of the directory (and
of mfsdp's manifest). mfsdp's other trainer-state fields, which place a resumed step's data,
are held to the rules the resume applies (`mfsdp_ckpt.format.trainer_state`), and a field a
resume reads that the state lacks is reported: a state without `extra.step` was "valid" and
its resume a KeyError traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.folder_step import ShownStep, folder_named_step, shown_step
from mfsdp_ckpt.format.saved_objects import load_plain, load_scalars
from mfsdp_ckpt.format.state_keys import EXTRA_KEY_PREFIX
from mfsdp_ckpt.format.trainer_state import (
    RULED_FIELDS,
    STEP,
    field_problem,
    missing_fields,
    required_fields,
)
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointFormatError, CheckpointReader

STEP_KEY = f"{EXTRA_KEY_PREFIX}step"
ITERATION_KEY = "iteration"  # Megatron-LM's and Megatron-Bridge's DCP entry
MAX_STEP_BLOB_BYTES = 64 << 10  # torch.save of an int is about 1.3 KB

# (where, what is wrong): where is the DCP dir, or the file holding the record
StepProblem = tuple[Path, str]


def trainer_step_problems(
    paths: layout.CheckpointPaths, reader: CheckpointReader, known: Mapping[str, int | None]
) -> list[StepProblem]:
    """What is wrong with each record of the step a resume continues from: mfsdp's
    `extra.step` (in any layout holding it), Megatron-LM's `iteration`, Megatron-Bridge's
    train_state.pt `step`. `known` names the steps each must equal (its directory's, its
    manifest's; None where there is none), as must a bare DCP's `step-N` folder name."""
    known = {**known, "its folder name": folder_named_step(paths)}
    mfsdp = f"its trainer state ({STEP_KEY})"
    found = [(paths.dist_ckpt, _entry_problem(reader, STEP_KEY, mfsdp, known))]
    ours = paths.kind == layout.MFSDP
    found += [(paths.dist_ckpt, problem) for problem in _state_field_problems(reader, ours)]
    iteration = f"its {ITERATION_KEY} entry (the step {{}} resumes from)"
    if paths.kind == layout.MEGATRON_LM:
        what = iteration.format("Megatron-LM")
        found.append((paths.dist_ckpt, _entry_problem(reader, ITERATION_KEY, what, known)))
    elif paths.kind == layout.MEGATRON_BRIDGE and paths.step_dir is not None:
        train_state = paths.step_dir / layout.BRIDGE_TRAIN_STATE_FILE
        if os.path.lexists(train_state):
            found.append((train_state, _train_state_problem(train_state, paths.root, known)))
        else:
            what = iteration.format(f"Megatron-Bridge, without a {train_state.name},")
            found.append((paths.dist_ckpt, _entry_problem(reader, ITERATION_KEY, what, known)))
    return [(where, problem) for where, problem in found if problem is not None]


def checkpoint_step(paths: layout.CheckpointPaths, reader: CheckpointReader) -> ShownStep:
    """The step of the checkpoint at `paths` whose DCP `reader` reads, and whether only its
    folder's name gives it: the one answer inspect, validate and export-hf give, so that a
    script reading one command's --json finds the same step in the others'."""
    return shown_step(paths, reader.objects, entry_step(reader))


def entry_step(reader: CheckpointReader) -> int | None:
    """The step a DCP's own entries record (mfsdp's `extra.step`, else Megatron's
    `iteration`), None where neither holds a step number that can be read (what is wrong
    with one, `trainer_step_problems` says)."""
    for key in (STEP_KEY, ITERATION_KEY):
        read = _entry_value(reader, key, key)
        if read is None:
            continue
        value, unread = read
        if unread is None and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _state_field_problems(reader: CheckpointReader, in_step_dir: bool) -> list[str]:
    """What is wrong with mfsdp's trainer state beside its step (`extra.step`, judged by
    `_entry_problem`): a field a resume reads that it lacks, a field whose value breaks its
    rule (`trainer_state.field_problem`); `in_step_dir`: the checkpoint is a step of an
    mfsdp run (`trainer_state.required_fields`). Nothing where the checkpoint holds no `extra`
    (another trainer's, an import; a manifest listing it is reported where contents are)."""
    held = [
        k.removeprefix(EXTRA_KEY_PREFIX) for k in reader.objects if k.startswith(EXTRA_KEY_PREFIX)
    ]
    if not held:
        return []
    found = [
        f"its trainer state has no {EXTRA_KEY_PREFIX}{key}"
        for key in missing_fields(held, required_fields(held, in_step_dir))
    ]
    for key in held:
        if key == STEP or key not in RULED_FIELDS:
            continue  # the step is judged with the others'; a field mfsdp does not record
        read = _reported_value(reader, EXTRA_KEY_PREFIX + key, f"its trainer state's {key}")
        if read is None:
            continue  # its data file is missing: said where the files are checked
        value, unread = read
        problem = unread or field_problem(key, value)
        if problem is not None:
            found.append(problem if unread else f"its trainer state {problem}")
    return found


def _entry_problem(
    reader: CheckpointReader, key: str, what: str, known: Mapping[str, int | None]
) -> str | None:
    """The DCP entry `key` judged as a step (`_judged`); None when there is no such entry
    (another trainer's checkpoint, an import) or its data file is missing (reported where
    the files are checked)."""
    read = _reported_value(reader, key, what)
    if read is None:
        return None
    step, unread = read
    if unread is not None:
        return unread
    return _judged(step, what, known)


# (the value of a DCP entry, None) or (None, why it is not read)
_EntryRead = tuple[object, str | None]


def _reported_value(reader: CheckpointReader, key: str, what: str) -> _EntryRead | None:
    """`_entry_value`, for a check whose report says why the entry is not read: marked so
    (`said_unreadable`), validate's decode of every entry leaves it to that line."""
    read = _entry_value(reader, key, what)
    if read is not None and read[1] is not None:
        reader.decoded.said_unreadable(key)
    return read


def _entry_value(reader: CheckpointReader, key: str, what: str) -> _EntryRead | None:
    """(the value of the small DCP entry `key`, None), read bounded once per reader; or
    (None, why it is not read); or None where there is no such entry or its data file is
    missing (reported where the files are checked). None, not a placeholder value: a caller
    must say what it does then, so that no placeholder is ever judged (or printed) as the
    entry's value."""
    entry = reader.objects.get(key)
    if entry is None or entry.file is None:
        return None
    try:
        if reader.store.size(entry.file) is None:
            return None
    except CheckpointFileError:  # a link out, a FIFO: reported where the files are checked
        return None
    if entry.length > MAX_STEP_BLOB_BYTES:
        return None, f"{what} is {entry.length} bytes, more than a number takes; not read"
    try:
        return reader.decoded.once(key, lambda: _step_value(reader, key)), None
    except (CheckpointFormatError, CheckpointFileError) as err:
        reason = str(err).split("]: ", 1)[-1]  # after its where: the data file named here
        return None, f"{what} cannot be read from {entry.file} ({reason})"


def _step_value(reader: CheckpointReader, key: str) -> object:
    """The value the DCP entry `key` holds: read once per reader (`reader.decoded`)."""
    entry = reader.objects[key]
    if entry.transforms:  # a compressed blob: torch decodes it
        return reader.read_object(key)
    # plain bytes: read without importing torch (export stays torch-free)
    raw = reader.store.read_range(entry.file or "", entry.file_offset, entry.length)
    return load_plain(raw, f"{reader.root} [{key}]")


def _train_state_problem(
    train_state: Path, root: Path, known: Mapping[str, int | None]
) -> str | None:
    """Megatron-Bridge's train_state.pt `step` judged as a step: read bounded, its 0-dim
    tensors' values from their bytes (`load_scalars`: the restricted unpickler)."""
    what = "its step (the step Megatron-Bridge resumes from)"
    try:
        raw = safe_files.read_bytes(train_state, layout.BRIDGE_TRACKER_MAX_BYTES, root=root)
        scalars = load_scalars(raw, str(train_state))
    except (CheckpointFormatError, CheckpointFileError) as err:
        return f"{what} cannot be read ({str(err).split(': ', 1)[-1]})"
    if "step" not in scalars:
        return "holds no step, which Megatron-Bridge resumes from"
    return _judged(scalars["step"], what, known)


def _judged(step: object, what: str, known: Mapping[str, int | None]) -> str | None:
    """What is wrong with `step` as the step a resume continues from: no integer, below 0,
    or unequal to one of `known`."""
    if not isinstance(step, int) or isinstance(step, bool):
        return f"{what} holds {cut_to(repr(step), 40)} ({type(step).__name__}), not a step number"
    if step < 0:
        return f"{what} says step {step}, and a step is 0 or more"
    for name, recorded in known.items():
        if recorded is not None and recorded != step:
            return f"{what} says step {step}, but {name} says step {recorded}"
    return None
