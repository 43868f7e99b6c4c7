"""The rules each field of mfsdp's trainer state (a checkpoint's `extra`) must meet for a run
to resume from it: one place, read by `validate` and by the resume alike, so that "valid"
means resumable.

A resume places its data by these numbers (`trainer.resume`): a state whose seed was the
string "0" or whose row count was -5 passed `validate --deep` and was then refused by the
resume, the row count as a config change (exit 2) where the checkpoint was damaged, and a
shuffle flag of 2 was told apart from this run's `true` as "data.shuffle=true but the
checkpoint was trained with data.shuffle=true". A field mfsdp does not record is left to
its writer (forward compatible).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mfsdp_ckpt.check.printable import cut_to

STEP = "step"
# what places a step's data, recorded since the first trainer checkpoint
POSITION_FIELDS = ("global_batch_size", "train_rows", "seed")
REQUIRED_FIELDS = (STEP, *POSITION_FIELDS)
FLAG_FIELDS = ("shuffle",)  # 0 or 1 (a bool as torch may store it)
# each integer field: (its least value, what it is, for the line that refuses it)
INT_FIELDS = {
    STEP: (0, "a step"),
    "global_batch_size": (1, "a batch size"),
    "train_rows": (1, "a row count"),
    "seed": (0, "a seed"),
    "rows_digest": (0, "a digest"),
    "prompts_digest": (0, "a digest"),
    "prompt_keys_digest": (0, "a digest"),
}

RULED_FIELDS = (*INT_FIELDS, *FLAG_FIELDS)


def field_problem(key: str, value: object) -> str | None:
    """What is wrong with `value` as the trainer state's field `key`, in words that follow
    "its trainer state" ("holds seed='0', not an integer"); None when it is fine or `key`
    is no field mfsdp records."""
    shown = f"{key}={cut_to(repr(value), 40)}"
    if key in FLAG_FIELDS:
        flag = isinstance(value, int) and value in (0, 1)  # a bool is an int: a stored flag too
        return None if flag else f"holds {shown}, not 0 or 1"
    if key not in INT_FIELDS:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        return f"holds {shown}, not an integer"
    least, what = INT_FIELDS[key]
    return f"holds {shown}, but {what} is {least} or more" if value < least else None


def required_fields(keys: Iterable[str], in_step_dir: bool) -> tuple[str, ...]:
    """The fields a trainer state holding `keys` must hold: every one a resume reads
    (`REQUIRED_FIELDS`) where it holds any field mfsdp's trainer records beside the step;
    else (a `Checkpointer` save of a state of the caller's own, which no `mfsdp train`
    resumes) the step alone in an mfsdp step dir (`in_step_dir`), which its manifest
    describes, and nothing in a bare DCP dir (another tool's keys)."""
    if any(key in RULED_FIELDS and key != STEP for key in keys):
        return REQUIRED_FIELDS
    return (STEP,) if in_step_dir else ()


def missing_fields(keys: Iterable[str], required: Iterable[str] = REQUIRED_FIELDS) -> list[str]:
    """The fields of `required` that a trainer state holding `keys` lacks."""
    held = set(keys)
    return [key for key in required if key not in held]


def state_problems(state: Mapping[str, object]) -> list[str]:
    """`field_problem` of every field of `state`, in its order (the fields it holds)."""
    found = (field_problem(key, value) for key, value in state.items())
    return [problem for problem in found if problem is not None]
