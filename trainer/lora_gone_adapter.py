"""Resuming a LoRA run that started from `model.lora_adapter_path` once that dir is gone.

The adapter dir sets a run's r, lora_alpha and target_modules (and its first step's
weights); a resumed step holds the adapter's weights itself and its manifest records those
settings (`lora`). A dir on scratch or tmp storage, removed since, stopped the resume as a
missing path ("does not exist (a local PEFT adapter dir is needed ...)"), which read as if
the run could not go on, though model.lora_rank, lora_alpha and target_modules at the
recorded values resume it exactly. Where a step is to be resumed, those values take the
dir's place, with a note; a fresh start without the dir is still refused by its key. An
adapter whose settings those keys cannot give (rslora, a dropout: a fresh adapter has
neither) is refused with the route that keeps them: the step's adapter exported as a dir.

Run by the launching process (and `config check`) before the path keys are checked, and by
each rank as it loads the config, so every process builds the same adapter.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.checkpoint_resolution import checkpoint_to_resume
from trainer.config import ConfigError
from trainer.lora_adapter_hints import KEY
from trainer.resume import manifest_of

log = logging.getLogger("mfsdp.config")

# Recorded settings a fresh adapter (the model.* keys) trains with: any other value of them
# only an adapter dir gives
_FRESH = {"use_rslora": False, "lora_dropout": 0.0}


def resume_without_adapter_dir(cfg: Any) -> None:
    """Where `cfg` (an SFT or GRPO config) names an adapter dir that is not here and resumes
    a step whose manifest records its adapter, set model.lora_rank, lora_alpha and
    target_modules to the recorded values and clear model.lora_adapter_path, with a note.
    Left as it is otherwise: a fresh start, a step without an adapter record, or a run dir
    whose own checks refuse it, each said where the config is checked."""
    model = cfg.model
    gone = model.lora_adapter_path
    if gone is None or os.path.lexists(gone):
        return
    try:
        found = checkpoint_to_resume(cfg.trainer.run_dir, cfg.checkpoint.resume)
    except (MfsdpError, OSError):
        return
    manifest = manifest_of(found) if found is not None else None
    trained = manifest.lora if manifest is not None else None
    if found is None or not isinstance(trained, dict):
        return
    step = found.step_dir or found.dist_ckpt
    rank, alpha, targets = (trained.get(k) for k in ("r", "lora_alpha", "target_modules"))
    if not (isinstance(rank, int) and isinstance(alpha, (int, float))):
        return  # a record without them: no settings to take
    if not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)):
        return
    unset = [f"{k} {trained.get(k)!r}" for k, v in _FRESH.items() if trained.get(k, v) != v]
    if unset:
        raise ConfigError(
            f"{KEY}: {gone} does not exist, and the adapter {step} resumes has"
            f" {', '.join(unset)}, which only an adapter dir sets: export it with"
            f" {mfsdp_command('ckpt export-hf', step, '--adapter-only --out DIR')} and give"
            f" {KEY}=DIR (the run trains"
            " on from the step's weights)"
        )
    model.lora_adapter_path = None
    model.lora_rank, model.lora_alpha, model.target_modules = rank, alpha, targets
    log.warning(
        "note: %s %s does not exist; resuming %s with its own adapter, as its manifest"
        " records it: model.lora_rank=%s model.lora_alpha=%s model.target_modules=[%s]",
        KEY,
        gone,
        step,
        rank,
        alpha,
        first_of(targets, 8, ","),
    )
