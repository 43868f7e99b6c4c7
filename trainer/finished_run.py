"""A rerun of a finished run, told before torch loads.

Running the same train command again once its run finished loaded torch and transformers,
built the model, read the data and loaded the newest checkpoint (seconds on CPU, minutes and
a launch of N processes for a large model) only to say "nothing left to train". Where the
newest complete step already reaches the run's end and the run dir's record of its config
(`RUN/config.yaml`) holds this command's settings, the answer is known from the run dir's
small files: its tracker and step dirs, the step's manifest and the config record; the
step's files are checked as a resume checks them before it loads (their digests against the
manifest), without torch.

Anything short of that plain case (another `checkpoint.resume`, steps that the data
decides, a setting changed since the step, a LoRA step, another kind of run's step, a
record that cannot be read, a damaged step, a model dir changed since the step was saved)
starts the run as before, which compares and refuses as it always did. The data files are
not read: one changed under the same config is not warned of (a run that trains no step
reads it for that warning alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.validate import manifest_hash_errors, require_valid
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format import checkpoint_resolution
from mfsdp_ckpt.format.layout import CheckpointPaths
from mfsdp_ckpt.format.manifest import read_manifest
from mfsdp_ckpt.storage import safe_files
from trainer.config import RESOLVED_CONFIG_FILE, config_to_dict, end_step
from trainer.config_history import changed_keys, until_step_file
from trainer.config_yaml import MAX_CONFIG_BYTES, parse_yaml
from trainer.resume import run_kind_of


@dataclass
class FinishedRun:
    """What a finished run's result reports (`cli.run_report.report_run`), as a run resumed
    at its newest step `final_step` with nothing to train reports it; its values are the
    ones the run logged in metrics.jsonl (`cli.run_report.final_value`)."""

    run_dir: str
    final_step: int
    last_checkpoint: Path

    @property
    def resumed_from(self) -> int:
        return self.final_step


def finished_run(kind: str, cfg: Any) -> FinishedRun | None:
    """The run of `cfg` (a `kind` run, "sft" or "grpo") when its newest complete step is at
    or past its end, was trained with these settings and holds the files its manifest lists
    (`_intact`); None wherever the run itself must decide (the module's docstring)."""
    total = cfg.trainer.total_steps
    if cfg.checkpoint.resume != "auto" or not total or cfg.trainer.steps_within_epochs:
        return None
    run_dir = Path(cfg.trainer.run_dir)
    try:
        found = checkpoint_resolution.checkpoint_to_resume(run_dir, "auto")
        if found is None or found.step is None or found.step < end_step(total, cfg):
            return None
        if found.manifest is None or found.step_dir is None:
            return None
        manifest = read_manifest(found.manifest)
        if run_kind_of(manifest.info) != kind or manifest.lora is not None:
            return None
        if manifest.info.get("total_steps") != total:
            return None  # a step of another schedule
        if until_step_file(run_dir, found.step).exists():
            return None  # settings kept aside since the step: the record is not its own
        text = safe_files.read_text(run_dir / RESOLVED_CONFIG_FILE, MAX_CONFIG_BYTES, run_dir)
        recorded = parse_yaml(text, str(run_dir / RESOLVED_CONFIG_FILE))
        saved_at = found.manifest.stat().st_mtime
        if not isinstance(recorded, dict) or not _model_files_older(cfg.model, saved_at):
            return None
        now, defaults = config_to_dict(cfg), config_to_dict(type(cfg)())
        if changed_keys(recorded, now, defaults) or not _intact(found):
            return None
    except (MfsdpError, OSError, ValueError):  # the run says what is wrong itself
        return None
    return FinishedRun(str(cfg.trainer.run_dir), found.step, found.step_dir)


def _model_files_older(model: Any, saved_at: float) -> bool:
    """Whether the model's local dirs (`model.path`, `hf_config`, `tokenizer`), and the
    config.json in each, were last changed before the step was saved (`saved_at`): the
    model config a resume compares with the step's comes from there, through transformers
    (a file replaced or edited changes the one or the other). A path that is no local dir
    (a hub id) is not known here."""
    for given in (model.path, model.hf_config, model.tokenizer):
        if given is None:
            continue
        folder = Path(given)
        if not folder.is_dir():
            return False
        config = folder / "config.json"
        changed = [folder.stat().st_mtime, *([config.stat().st_mtime] if config.exists() else [])]
        if max(changed) > saved_at:
            return False
    return True


def _intact(found: CheckpointPaths) -> bool:
    """Whether the step passes the checks a resume makes before it loads a byte: the cheap
    ones (CheckpointInvalidError, an MfsdpError, when one fails), then every file's digest
    against the manifest. A damaged step is left to the run, which refuses it naming the
    file, as before."""
    require_valid(found, manifest_only=True)
    return not manifest_hash_errors(found)
