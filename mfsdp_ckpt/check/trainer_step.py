"""The step a checkpoint's trainer state records, checked against the step it is at.

Where mfsdp wrote a checkpoint, its step is known three ways: its directory's name
(`global_step_N`), its manifest and its trainer state (the DCP entry `extra.step`, which a
resume continues from). The first two were compared; the third was read by nothing but a
resume, so a `global_step_2` whose trainer state said step -5 passed `validate --deep
--strict` and then resumed "steps -5 -> 3", its metrics and config history overwritten.
Validate reads that one small entry (bounded, through the reader's restricted loader: never
code) and reports a value that is no step, or disagrees with the other two.
"""

from __future__ import annotations

from collections.abc import Mapping

from mfsdp_ckpt.format.saved_objects import load_plain
from mfsdp_ckpt.format.state_keys import EXTRA_KEY_PREFIX
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointFormatError, CheckpointReader

STEP_KEY = f"{EXTRA_KEY_PREFIX}step"
MAX_STEP_BLOB_BYTES = 64 << 10  # torch.save of an int is about 1.3 KB


def trainer_step_problem(reader: CheckpointReader, known: Mapping[str, int | None]) -> str | None:
    """What is wrong with the step the trainer state records, in words, or None: no such
    entry (another trainer's checkpoint, an import), its data file missing (reported where
    the files are checked), or a step equal to each of `known` (what names it: its
    directory's, its manifest's; None where there is none)."""
    entry = reader.objects.get(STEP_KEY)
    if entry is None or entry.file is None:
        return None
    try:
        if reader.store.size(entry.file) is None:
            return None
    except CheckpointFileError:  # a link out, a FIFO: reported where the files are checked
        return None
    what = f"its trainer state ({STEP_KEY})"
    if entry.length > MAX_STEP_BLOB_BYTES:
        return f"{what} is {entry.length} bytes, more than a step number takes; not read"
    try:
        if entry.transforms:  # a compressed blob: torch decodes it
            step = reader.read_object(STEP_KEY)
        else:  # plain bytes: read without importing torch (export stays torch-free)
            raw = reader.store.read_range(entry.file, entry.file_offset, entry.length)
            step = load_plain(raw, f"{reader.root} [{STEP_KEY}]")
    except (CheckpointFormatError, CheckpointFileError) as err:
        return f"{what} cannot be read ({str(err).split(']: ', 1)[-1]})"  # after its where
    if not isinstance(step, int) or isinstance(step, bool):
        return f"{what} holds {step!r:.40} ({type(step).__name__}), not a step number"
    if step < 0:
        return f"{what} says step {step}, and a step is 0 or more"
    for name, recorded in known.items():
        if recorded is not None and recorded != step:
            return f"{what} says step {step}, but {name} says step {recorded}"
    return None
