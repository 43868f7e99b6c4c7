"""verl's ckpt_contents.json, read bounded and as JSON data only.

Both the resolution of a verl v2 role dir and the refusal of verl's LoRA save read it, so
a hostile or broken file is refused the same way, in one line, wherever it is met: as a
checkpoint whose content is broken (exit 1), as a damaged tracker or manifest is. verl
writes the file through a temporary file, fsync and rename, so a broken one is damage on
disk, not a path that names no checkpoint (it was exit 2, bad usage).
"""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format.layout import (
    CONTENTS_MAX_BYTES,
    DIST_CKPT_DIR,
    HF_ASSETS_DIR,
    VERL_CONTENTS_FILE,
    VERL_MODEL_DIR,
    CheckpointPathError,
)
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.unique_json import loads_object


class VerlContentsError(MfsdpFailedError, ValueError):
    """A verl step's ckpt_contents.json that is no JSON object, or no regular file of a
    bounded size; `file` names it, for a report that lists it as a finding."""

    def __init__(self, message: str, file: Path | None = None) -> None:
        super().__init__(message)
        self.file = file


def read_verl_contents(role_dir: Path) -> dict:
    """verl's ckpt_contents.json (schema 2), bounded and read only as JSON data."""
    file = role_dir / VERL_CONTENTS_FILE
    try:
        text = safe_files.read_text(file, CONTENTS_MAX_BYTES, root=role_dir)
        return loads_object(text, str(file), VerlContentsError)
    except (CheckpointFileError, VerlContentsError) as err:
        raise VerlContentsError(str(err), file) from None


class VerlNoModelError(MfsdpFailedError, ValueError):
    """A verl v2 step whose ckpt_contents.json records a finished save that holds no model
    weights (save_contents without "model"): exit 1, as `export-hf` says of any checkpoint
    holding no model weights."""


def refuse_saved_without_model(role_dir: Path, contents: dict, has_dcp: bool) -> None:
    """A v2 step whose ckpt_contents.json (written last, by rename: the save finished) says
    the model was not saved is named as that: "did not finish" and a missing model/dist_ckpt
    called "empty" sent the user looking for a crash. Saved with hf_model alone, its
    Hugging Face dir is the model to give. Nothing is said where a DCP is there to read or
    save_contents is absent or not a list (read as before)."""
    saved = contents.get("save_contents")
    if has_dcp or not isinstance(saved, list) or "model" in saved:
        return
    shown = ", ".join(str(item) for item in saved)
    if "hf_model" in saved:
        hf = role_dir / VERL_MODEL_DIR / HF_ASSETS_DIR
        raise hf_model_only(role_dir, hf, f"{VERL_CONTENTS_FILE} save_contents=[{shown}]")
    raise VerlNoModelError(
        f"{role_dir}: checkpoint holds no model weights ({VERL_CONTENTS_FILE}"
        f" save_contents=[{shown}])"
    )


class VerlHfModelOnlyError(CheckpointPathError):
    """A verl step that holds only the Hugging Face model verl saved: a step of a run, so
    never "neither a model dir nor a checkpoint" when given as model.path."""


def hf_model_only(role_dir: Path, hf: Path, recorded: str) -> VerlHfModelOnlyError:
    """The line for a verl step saved with `save_contents=[hf_model]` alone (`recorded` says
    how that is known): its Hugging Face dir is the model to give."""
    return VerlHfModelOnlyError(
        f"{role_dir}: verl saved only its Hugging Face model here ({recorded}, no"
        f" {DIST_CKPT_DIR} model state); its weights are a Hugging Face dir: {hf} (give"
        f" model.path={hf}, or load it with transformers)"
    )
