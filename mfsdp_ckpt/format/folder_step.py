"""The step a checkpoint is shown at, and whether only its folder's name says so.

mfsdp's own steps record their step in manifest.json and `extra.step`; Megatron-LM's in the
DCP's `iteration` entry, Megatron-Bridge's in train_state.pt, the HF Trainer's in
trainer_state.json. Other tools' saves record none in the files mfsdp reads: a torchtitan
model-only step (`step-N/`, a bare model state dict, no train_state), verl's `global_step_N/`,
a Megatron `iter_NNNNNNN/` without its `iteration` entry. Their folder names the step: a
torchtitan step read as a bare DCP was shown as "step -", and the others showed the folder's
number as if the checkpoint recorded it. `shown_step` gives the number and whether it comes
from the folder's name alone, which `step_words` says.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mfsdp_ckpt.format import hf_trainer, layout, torchtitan
from mfsdp_ckpt.format.dir_entries import is_file
from mfsdp_ckpt.format.state_keys import EXTRA_KEY_PREFIX

FROM_FOLDER_NAME = "folder_name"  # `ShownStep.source` (inspect --json's step_from)
# DCP entries holding the step a resume continues from (`check.trainer_step` reads them)
_STEP_RECORDS = (f"{EXTRA_KEY_PREFIX}step", "iteration")


@dataclass(frozen=True)
class ShownStep:
    """`step`: None when neither the files nor the folder name one; `source`:
    FROM_FOLDER_NAME where the folder's name alone gives it, else None."""

    step: int | None
    source: str | None = None


def shown_step(
    paths: layout.CheckpointPaths, entries: Iterable[str], recorded: int | None = None
) -> ShownStep:
    """The step of the checkpoint at `paths`, whose DCP holds the entries named `entries`:
    its resolved step, or for a bare DCP the step its entries record (`recorded`, read by
    the caller: `extra.step`, Megatron's `iteration`), else for one named `step-N`
    (torchtitan's folder name) N, said to come from the folder name. A bare DCP whose
    entries hold a step not given in `recorded` shows none: the folder's number is not
    what its files say (`folder_named_step` holds the two together)."""
    step = paths.step
    if step is None and paths.kind == layout.BARE_DCP:
        if recorded is not None:
            return ShownStep(recorded)
        if any(name in _STEP_RECORDS for name in entries):
            return ShownStep(None)
        named = folder_named_step(paths)
        return ShownStep(named, FROM_FOLDER_NAME) if named is not None else ShownStep(None)
    if step is None or _records_step(paths, entries):
        return ShownStep(step)
    return ShownStep(step, FROM_FOLDER_NAME)


def folder_named_step(paths: layout.CheckpointPaths) -> int | None:
    """N of a bare DCP dir named `step-N` (torchtitan's folder name), else None: the step a
    record in its files (`extra.step`) is held to, as a step dir's name is."""
    if paths.kind != layout.BARE_DCP:
        return None
    named = torchtitan.step_of(paths.dist_ckpt)
    return named if named >= 0 else None


def step_words(shown: ShownStep) -> str:
    """`-`, `N`, or `N (from the folder name)`: a line's words for the step."""
    if shown.step is None:
        return "-"
    return f"{shown.step} (from the folder name)" if shown.source else str(shown.step)


def _records_step(paths: layout.CheckpointPaths, entries: Iterable[str]) -> bool:
    """Whether the checkpoint's own files record its step: mfsdp's manifest, the HF
    Trainer's trainer_state.json, Megatron-Bridge's train_state.pt, or a DCP entry a resume
    continues from (`extra.step`, Megatron's `iteration`)."""
    if paths.kind == layout.MFSDP:
        return True
    if paths.kind == layout.HF_TRAINER and paths.step_dir is not None:
        # its recorded_step is the checkpoint-N name's where no trainer_state.json is read
        return hf_trainer.records_its_step(paths.step_dir)
    bridge = paths.step_dir if paths.kind == layout.MEGATRON_BRIDGE else None
    if bridge is not None and is_file(bridge / layout.BRIDGE_TRAIN_STATE_FILE):
        return True
    return any(name in _STEP_RECORDS for name in entries)
