"""`checkpoint.resume` read as a config key: `auto`, `disable` or the path of a checkpoint,
refused as every other path key is, by its key, before torch loads.

A value that was neither word was taken for a path and first resolved by each rank once
the model was built (`checkpointer.find_resume`), whose line named the path alone:
`disabled: no such file or directory`, not the key, nor the word meant. A Hugging Face
model dir there (the weights to start from, which is `model.path`) was "not a training
checkpoint", with no word of the key that takes it.
"""

from __future__ import annotations

import copy
import os

from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.checkpoint_resolution import checkpoint_to_resume
from mfsdp_ckpt.format.layout import CheckpointPaths
from trainer.config_base import ConfigError
from trainer.config_suggestions import closest_choice

KEY = "checkpoint.resume"
WORDS = ("auto", "disable")  # what it takes besides a path
NEEDED = "auto | disable | a run, step or dist_ckpt dir"


def check_resume_path(run_dir: str, resume: str) -> CheckpointPaths | None:
    """The checkpoint `resume` (neither word) names, resolved as the ranks will resolve it
    (`checkpoint_to_resume`); else its error as the key's line (`named_resume_error`)."""
    try:
        return checkpoint_to_resume(run_dir, resume)
    except MfsdpError as err:
        raise named_resume_error(resume, err) from None


def named_resume_error(resume: str, err: MfsdpError) -> MfsdpError:
    """`err`, met resolving the path `resume`, as a line naming the key: a missing path like
    one of the words, with what the key takes and the word meant (`disabled`: disable); a
    model dir with the key that takes one; else `err` itself (its class, so its exit status),
    the key before its line unless the line names it already."""
    from trainer.local_paths import missing_path

    word = None if os.path.lexists(resume) else closest_choice(resume, WORDS)
    if word is not None:
        return ConfigError(f"{missing_path(KEY, resume, NEEDED)}; did you mean {word}?")
    if layout.looks_like_hf_model(_names_in(resume)):
        return ConfigError(
            f"{KEY}: {resume} is a Hugging Face model dir, not a training checkpoint; to start"
            f" from its weights give model.path={resume} ({KEY} takes {NEEDED})"
        )
    if KEY in str(err):  # another trainer's checkpoint: "give model.path=... instead of" it
        return err
    named = copy.copy(err)
    named.args = (f"{KEY}: {err}",)
    return named


def _names_in(path: str) -> list[str]:
    """The names in the directory `path`; none where it is no directory or unreadable (the
    resolver's own line says so)."""
    try:
        return os.listdir(path) if os.path.isdir(path) else []
    except OSError:
        return []
