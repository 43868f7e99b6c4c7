"""A step dir whose name spells its number otherwise than `global_step_<N>`.

verl, Megatron and mfsdp write `global_step_3`, never `global_step_00003`, `global_step_` and
a full-width 3, `global_step_+3`, `global_step_3.0` or `global_step_1e3`. Such a name
is no step dir of its run (`layout.parse_step_dir_name`: resuming and the run's steps
ignore it), so its step is its manifest's, and validate compared nothing: a copy of step 3
named `global_step_00010` was "valid ... step 3", where `global_step_10` says the manifest
and the directory disagree. A zero-padded name of the step it holds (`global_step_00003`)
is read as that step, as before. Names that are no number (`best/`, `global_step_3_good`)
are copies under a name of the user's, read as before.
"""

from __future__ import annotations

import math
from pathlib import Path

from mfsdp_ckpt.format.layout import STEP_DIR_PREFIX, parse_step_dir_name, step_dir


def misnamed_step(directory: Path | None, recorded: int) -> str | None:
    """Why `directory`, whose manifest records step `recorded`, is misnamed: its name is
    `global_step_` and a number in another spelling; None for any other name."""
    if directory is None or not directory.name.startswith(STEP_DIR_PREFIX):
        return None
    if parse_step_dir_name(directory.name) is not None:
        return None  # the canonical name: its number is compared with the manifest's
    number = directory.name.removeprefix(STEP_DIR_PREFIX)
    if not _spells_a_number(number):
        return None
    if number.isascii() and number.isdigit() and int(number) == recorded:
        return None  # zero-padded (a copy, a sorting script's name): the step it holds
    expected = step_dir(directory.parent, recorded).name
    return f"says step {recorded}, but the directory is named {directory.name}, not {expected}"


def _spells_a_number(text: str) -> bool:
    """Whether Python reads `text` as a finite number (leading zeros, a sign, Unicode digits,
    an exponent, a fraction, `0x3`): what a user or a script may take for a step."""
    for read in (float, lambda spelled: int(spelled, 0)):
        try:
            return math.isfinite(read(text))
        except ValueError:
            continue
    return False
