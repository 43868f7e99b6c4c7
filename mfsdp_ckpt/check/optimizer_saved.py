"""Whether a checkpoint's own record says its optimizer state was saved with it.

A step holding no optimizer state at all read as "valid, no optimizer state" even where
its writer recorded saving one: the state was then lost whole, and a resume restarts the
optimizer unnoticed (Megatron-LM's fsdp_dtensor load allows a partial load). The optimizer
check holds such a step to the rule it applies where Megatron's `param_to_group_meta`
outlives the state (`optimizer_checks`); this module says which record speaks and how
surely:

- verl v2's `ckpt_contents.json` is written last, from the `save_contents` the same save
  wrote by: 'optimizer' listed there while the step holds no state is damage, an error.
- Megatron-LM's `args` with `no_save_optim` None or False: its `save_checkpoint` saves the
  optimizer unless `--no-save-optim`, but also skips it silently when given no optimizer
  (a script saving the model alone, as Megatron-LM's modelopt prune does, with the
  training run's args) or a stub one (no parameter trains), recording nothing of it: a
  warning, so `--strict` fails, never a verdict of damage. A `release` step (converted or
  exported; Megatron-LM's load never reads its optimizer) and a run recording
  `freeze_all_layers` (nothing trains) are not asked.

Megatron-Bridge's run_config.yaml records no such switch for its own checkpoints here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mfsdp_ckpt.check.report import ERROR, WARNING
from mfsdp_ckpt.convert.megatron_record import ARGS_KEY, read_args
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.dir_entries import children, is_dir
from mfsdp_ckpt.format.verl_contents import VerlContentsError, read_verl_contents
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointReader

_VERL_V2 = (layout.VERL_RL_V2, layout.VERL_SFT_V2)
_OPTIMIZER_ITEM = "optimizer"  # verl's save_contents name for the optimizer state
# Megatron-LM's --no-save-optim: argparse records it in every run's args (default None), so
# args without it are no record of a Megatron-LM run (a hand-made or partial Namespace)
_NO_SAVE_OPTIM = "no_save_optim"


@dataclass(frozen=True)
class SavedOptimizer:
    """A record saying the step saved its optimizer state: `names_them`, how the line about
    a state lost whole says which record names the parameters; `severity`, ERROR where the
    record is written from what was saved, WARNING where a model-only save records the
    same."""

    names_them: str
    severity: str


def recorded_optimizer_save(
    paths: layout.CheckpointPaths, reader: CheckpointReader
) -> SavedOptimizer | None:
    """The record of the step at `paths` saying its optimizer state was saved (verl v2's
    ckpt_contents.json, Megatron-LM's args); None where none says so or it cannot be read
    (resolution and the config checks report a damaged one)."""
    if paths.kind in _VERL_V2:
        return _verl_saved(paths.dist_ckpt.parent.parent)
    if paths.run_config is not None or ARGS_KEY not in reader.objects:
        return None
    return _megatron_lm_saved(paths, reader)


def _verl_saved(role_dir: Path) -> SavedOptimizer | None:
    """ckpt_contents.json's word, unless verl's optimizer/dist_ckpt holds something: state
    kept there (not Megatron-FSDP's one DCP) is not read here, so not said to be lost."""
    try:
        saved = read_verl_contents(role_dir).get("save_contents")
    except (VerlContentsError, CheckpointFileError):
        return None
    if not isinstance(saved, list) or _OPTIMIZER_ITEM not in saved:
        return None
    own_dir = role_dir / _OPTIMIZER_ITEM / layout.DIST_CKPT_DIR
    if is_dir(own_dir) and children(own_dir):
        return None
    return SavedOptimizer(
        f"{layout.VERL_CONTENTS_FILE} records as optimized, as its save_contents lists"
        f" '{_OPTIMIZER_ITEM}'",
        ERROR,
    )


def _megatron_lm_saved(
    paths: layout.CheckpointPaths, reader: CheckpointReader
) -> SavedOptimizer | None:
    named = {paths.dist_ckpt.name, paths.step_dir.name if paths.step_dir else ""}
    if layout.MEGATRON_RELEASE_DIR in named:
        return None
    try:
        fields = read_args(reader)
    except (CheckpointFormatError, CheckpointFileError):
        return None
    if fields is None or _NO_SAVE_OPTIM not in fields or fields[_NO_SAVE_OPTIM]:
        return None
    if fields.get("freeze_all_layers"):
        return None
    return SavedOptimizer(
        f"{ARGS_KEY} records as optimized, as its {_NO_SAVE_OPTIM} is {fields[_NO_SAVE_OPTIM]}"
        " (Megatron-LM's save also leaves the optimizer out unrecorded when given none, as a"
        " model-only save under a training run's args is: not judged damage)",
        WARNING,
    )
