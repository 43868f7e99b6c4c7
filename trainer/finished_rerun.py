"""A rerun of a finished run (the same train command again once it ended) told that nothing
is left to train before torch loads: the full start-up loaded torch and transformers, read
the data and built the model (seconds for the tiny model, minutes for a large one) to say
the line `TrainingRun.announce` says.

Decided here only where the config and the run dir's files alone decide it, and the full
start-up would find nothing to refuse that they could tell:

- `checkpoint.resume=auto`, and `trainer.total_steps` set without
  `trainer.steps_within_epochs`: the steps planned need no data (`trainer.runner.
  planned_steps`: where the epochs decide them, they count the rows, which only reading
  the data gives);
- the run dir's config.yaml is this config as the run writes it (`write_resolved_config`):
  no setting changed, the model's, the data's and the run's included;
- the step `checkpoint.resume=auto` resumes (`checkpoint_to_resume`) is one this kind of
  run wrote, at or past the run's end (`end_step`), and passes the checks a resume makes
  of its files before it loads them (`require_valid`, every file's digest against the
  manifest): a shortcut that said "nothing left" over a corrupted step hid what a resume
  refuses;
- each data file is a regular file last changed before that step was saved: rows edited
  since would be refused by the resume's comparison of the rows, which needs the data read.

Anything else (a changed setting, a step that cannot be read or another kind of run wrote)
goes the full way, which checks it and says what it finds. Torch is not imported here.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.validate import manifest_hash_errors, require_valid
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.checkpoint_resolution import checkpoint_to_resume
from mfsdp_ckpt.format.layout import MANIFEST_FILE
from mfsdp_ckpt.storage import safe_files
from trainer.config import RESOLVED_CONFIG_FILE, config_to_dict, end_step
from trainer.config_yaml import MAX_CONFIG_BYTES, dump_yaml
from trainer.resume import manifest_of, nothing_left_line, run_kind_of


@dataclass(frozen=True)
class FinishedRun:
    """What a rerun of a finished run reports, as `trainer.runner.RunResult` says it: no step
    trained, so it ends where it resumed. `line`: what it says on stderr."""

    run_dir: Path
    final_step: int
    resumed_from: int
    last_checkpoint: Path
    line: str


def finished_rerun(cfg: Any, kind: str) -> FinishedRun | None:
    """The rerun of a finished run of `kind` ("sft", "grpo") that `cfg` is, decided without
    torch (the module docstring says when); None where the full start-up decides."""
    total = cfg.trainer.total_steps
    if cfg.checkpoint.resume != "auto" or not total or cfg.trainer.steps_within_epochs:
        return None
    run_dir = Path(cfg.trainer.run_dir)
    try:
        if not _same_config(run_dir, cfg):
            return None
        found = checkpoint_to_resume(run_dir, "auto")
        manifest = manifest_of(found) if found is not None else None
        if found is None or found.step is None or found.step_dir is None or manifest is None:
            return None
        if run_kind_of(manifest.info) != kind or found.step < end_step(total, cfg):
            return None
        if not _data_older_than(cfg, found.step_dir / MANIFEST_FILE):
            return None
        require_valid(found)
        if manifest_hash_errors(found):
            return None
    except (MfsdpError, OSError, ValueError):  # the full start-up says what is wrong
        return None
    return FinishedRun(
        run_dir=run_dir,
        final_step=found.step,
        resumed_from=found.step,
        last_checkpoint=found.step_dir,
        line=nothing_left_line(found.root, found.step, cfg, total),
    )


def _data_older_than(cfg: Any, saved: Path) -> bool:
    """Whether every data file `cfg` names is a regular file last changed before `saved`
    was written (a directory of shards, or a file changed since, is left to the full
    start-up, which reads the rows and compares them with the step's)."""
    since = saved.stat().st_mtime
    for path in [*cfg.data.train_files, *(cfg.data.val_files or [])]:
        found = os.stat(path)
        if not stat.S_ISREG(found.st_mode) or found.st_mtime > since:
            return False
    return True


def _same_config(run_dir: Path, cfg: Any) -> bool:
    """Whether the run dir's config.yaml is `cfg` as the run writes it, byte for byte."""
    recorded = safe_files.read_text(run_dir / RESOLVED_CONFIG_FILE, MAX_CONFIG_BYTES, run_dir)
    return recorded == dump_yaml(config_to_dict(cfg))
