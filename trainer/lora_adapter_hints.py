"""What a refusal of `model.lora_adapter_path` adds when the dir given is no adapter dir
but mfsdp knows what it is: a verl actor dir, step or run holding `lora_adapter/`, an mfsdp
LoRA checkpoint, or a dir whose adapter is a pickle. Each was told only that its
adapter_config.json or adapter_model.safetensors is missing."""

from __future__ import annotations

import os
from pathlib import Path

from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.dir_entries import children
from mfsdp_ckpt.format.layout import VERL_FSDP_LORA_DIR, step_dir
from mfsdp_ckpt.format.manifest import read_manifest
from mfsdp_ckpt.format.run_steps import natural_order, read_tracker, step_dirs
from mfsdp_ckpt.lora import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE

KEY = "model.lora_adapter_path"
ADAPTER_PICKLE_FILE = "adapter_model.bin"  # the weights as torch.save pickles them (peft)
# Where a dir that is no adapter dir holds one: verl's FSDP actor dir and its step dir
ADAPTER_SUBDIRS = (VERL_FSDP_LORA_DIR, f"actor/{VERL_FSDP_LORA_DIR}")


def where_the_adapter_is(path: Path) -> str:
    """`; ...` saying where the adapter of the dir `path` is, for a dir that holds one
    further down (verl's actor dir or step: `lora_adapter/`; verl's run dir: its tracked
    step's) or is an mfsdp LoRA checkpoint (a run or step, whose adapter `export-hf
    --adapter-only` writes); else ""."""
    inside = _adapter_subdir(path)
    if inside is not None:
        return f"; it holds a PEFT adapter dir, {inside}/: point {KEY} at {path / inside}"
    if _is_lora_checkpoint(path):
        export = mfsdp_command("ckpt export-hf", path, "--out DIR --adapter-only")
        return (
            f"; {path} is an mfsdp LoRA checkpoint: {export} writes its adapter, which"
            f" {KEY}=DIR takes (or continue its run"
            " with trainer.run_dir)"
        )
    step = _newest_verl_step(path)
    inside = None if step is None else _adapter_subdir(path / step)
    if step is not None and inside is not None:
        return (
            f"; it is a run dir whose step {step} holds a PEFT adapter dir: point {KEY} at"
            f" {path / step / inside}"
        )
    return ""


def pickle_hint(path: Path) -> str:
    """`; adapter_model.bin is a pickle ...` when the dir holds the weights as an older
    peft (or `safe_serialization=False`) saves them, else "": unpickling can run code, so
    that file is never loaded, and the user is told how to write the safetensors one."""
    if not os.path.lexists(path / ADAPTER_PICKLE_FILE):
        return ""
    return (
        f"; {ADAPTER_PICKLE_FILE} is a pickle, which mfsdp never loads (it can run code): if"
        " you trust it, load it with peft (PeftModel.from_pretrained) and save it with"
        f" save_pretrained(..., safe_serialization=True), which writes {ADAPTER_WEIGHTS_FILE}"
    )


def _adapter_subdir(path: Path) -> str | None:
    return next(
        (sub for sub in ADAPTER_SUBDIRS if (path / sub / ADAPTER_CONFIG_FILE).is_file()), None
    )


def _newest_verl_step(run: Path) -> str | None:
    """The step dir name a verl run dir resumes from: the one its
    latest_checkpointed_iteration.txt names, else its newest global_step_N; None for a
    dir with neither (or a damaged tracker, which the hint does not diagnose)."""
    try:
        tracked = read_tracker(run)
        names = sorted(step_dirs(run, children(run)), key=natural_order)
    except (MfsdpError, OSError):
        return None
    if tracked is not None:
        return step_dir(run, tracked).name
    return names[-1] if names else None


def _is_lora_checkpoint(path: Path) -> bool:
    """Whether `path` resolves to an mfsdp checkpoint (a run: its newest step) whose
    manifest records a LoRA adapter; a dir that is no checkpoint of ours is not one."""
    try:
        found = resolve_checkpoint(path)
        return found.manifest is not None and read_manifest(found.manifest).lora is not None
    except (MfsdpError, OSError):
        return False
