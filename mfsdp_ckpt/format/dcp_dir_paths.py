"""The checkpoint a DCP dir belongs to, named from the dirs around it.

A `dist_ckpt/` (or Megatron's `iter_N/`, or Accelerate's `pytorch_model_fsdp_K/`) is read
the same way whatever path led to it: its parent and grandparent tell mfsdp's step from
verl's SFT step, verl's v1 and v2 role dirs, Megatron-LM from Megatron-Bridge and the HF
Trainer's checkpoint-N. Every level that resolution walks down to ends here.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import hf_trainer
from mfsdp_ckpt.format.dir_entries import children, is_dcp, is_dir, is_file
from mfsdp_ckpt.format.foreign_formats import refuse_foreign_format, refuse_torchtitan
from mfsdp_ckpt.format.layout import (
    BRIDGE_HF_EXPORT_DIR,
    BRIDGE_RUN_CONFIG_FILE,
    BRIDGE_TRACKER_FILE,
    BRIDGE_TRAIN_STATE_FILE,
    DIST_CKPT_DIR,
    HF_ASSETS_DIR,
    HF_TRAINER,
    ITER_DIR_RE,
    MANIFEST_FILE,
    MEGATRON_BRIDGE,
    MEGATRON_LM,
    MEGATRON_RELEASE_DIR,
    MFSDP,
    ROLES,
    VERL_MODEL_DIR,
    VERL_RL_V1,
    VERL_RL_V2,
    VERL_SFT,
    VERL_SFT_V2,
    CheckpointPathError,
    CheckpointPaths,
    DamagedTrackerError,
    noted,
    parse_step_dir_name,
)
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.format.run_steps import is_ours
from mfsdp_ckpt.storage.byte_store import CheckpointFileError


def from_dcp_dir(dcp: Path, role: str | None) -> CheckpointPaths:
    """Name the layout of a DCP dir from the directories around it."""
    refuse_foreign_format(dcp, children(dcp))
    refuse_torchtitan(dcp, dcp)
    parent = dcp.parent
    if hf_trainer.MODEL_DCP_RE.match(dcp.name):
        return _hf_trainer_paths(dcp)
    model = hf_trainer.model_dir_of_optimizer(dcp)
    if model is not None and is_dcp(model):
        note = f"{dcp} holds the optimizer state only: reading the checkpoint {model}"
        return noted(_hf_trainer_paths(model), note)
    if ITER_DIR_RE.match(dcp.name) or (dcp.name == MEGATRON_RELEASE_DIR):
        kind = megatron_kind(dcp)
        hf_dir = _bridge_hf_export(dcp) if kind == MEGATRON_BRIDGE else None
        return CheckpointPaths(dcp, dcp, parent, kind, hf_dir=hf_dir)
    if dcp.name != DIST_CKPT_DIR:
        return CheckpointPaths(dist_ckpt=dcp)
    hf_dir = parent / HF_ASSETS_DIR if is_dir(parent / HF_ASSETS_DIR) else None
    if parse_step_dir_name(parent.name) is not None:  # ours or verl SFT: no role level
        kind = MFSDP if is_ours(parent) else VERL_SFT
        return CheckpointPaths(dcp, parent, parent.parent, kind, hf_dir=hf_dir)
    if (
        parent.name == VERL_MODEL_DIR and parent.parent.name in ROLES
    ):  # verl v2: actor/model/dist_ckpt
        return _role_paths(dcp, parent.parent, VERL_RL_V2, hf_dir, role)
    if parent.name == VERL_MODEL_DIR and parse_step_dir_name(parent.parent.name) is not None:
        # verl's SFT trainer hands the step dir to the engine's checkpoint manager, which
        # writes the v2 split there (no role level): global_step_N/model/dist_ckpt
        step = parent.parent
        return CheckpointPaths(dcp, step, step.parent, VERL_SFT_V2, hf_dir=hf_dir)
    if parent.name in ROLES:  # verl v1: actor/dist_ckpt
        return _role_paths(dcp, parent, VERL_RL_V1, hf_dir, role)
    recorded = _step_in_our_manifest_beside(dcp)
    if recorded is not None:
        # a step of ours copied under another name (`best/`): read as a bare dist_ckpt, its
        # manifest went unread (no step, "file hashes were not checked")
        return replace(
            CheckpointPaths(dcp, parent, parent.parent, MFSDP, hf_dir=hf_dir),
            recorded_step=recorded,
        )
    return CheckpointPaths(dist_ckpt=dcp, hf_dir=hf_dir)


def _step_in_our_manifest_beside(dcp: Path) -> int | None:
    """The step the manifest mfsdp wrote beside `dcp` records; None where there is none
    (another tool's manifest.json there leaves it a bare dist_ckpt; a damaged one of ours is
    made our step by `checkpoint_resolution`)."""
    from mfsdp_ckpt.format.manifest import ManifestError, read_manifest

    try:
        manifest = read_manifest(dcp.parent / MANIFEST_FILE)
    except (ManifestError, OSError, ValueError):
        return None
    return manifest.step if manifest is not None else None


def _hf_trainer_paths(dcp: Path) -> CheckpointPaths:
    """Accelerate's `pytorch_model_fsdp_K/`: the checkpoint is the dir holding it (the
    Trainer's checkpoint-N, whose run is the dir above), with the optimizer state in
    `optimizer_K/` beside it, config.json and tokenizer files beside it when saved there
    (as whatever is there under the name, so that a link or a FIFO is refused by the
    reader, not taken for no config), and the step trainer_state.json records (one that
    does not read is DamagedTrackerError: the Trainer cannot resume from it, and validate
    offers the run's other checkpoints)."""
    checkpoint = dcp.parent
    in_run = hf_trainer.checkpoint_number(checkpoint.name) is not None
    try:
        step, note = hf_trainer.recorded_step(checkpoint)
    except (CheckpointFormatError, CheckpointFileError) as err:  # the Trainer's resume fails
        tracker = checkpoint / hf_trainer.TRAINER_STATE_FILE
        raise DamagedTrackerError(
            str(err), tracker, checkpoint.parent if in_run else checkpoint
        ) from None
    if in_run and not os.path.lexists(checkpoint / hf_trainer.TRAINER_STATE_FILE):
        note = (
            f"{checkpoint} holds no {hf_trainer.TRAINER_STATE_FILE}, which the Trainer writes"
            " last: this save may not have finished, and resume_from_checkpoint cannot resume it"
        )
    optimizer = hf_trainer.optimizer_dir(dcp)
    names = children(checkpoint)
    return CheckpointPaths(
        dcp,
        checkpoint,
        checkpoint.parent if in_run else None,
        HF_TRAINER,
        hf_dir=checkpoint if os.path.lexists(checkpoint / HF_CONFIG_FILE) else None,
        note=note,
        optimizer_dcp=optimizer if os.path.lexists(optimizer) else None,
        recorded_step=step,
        hf_skip=tuple(n for n in names if n in hf_trainer.TRAINER_FILES or is_dir(checkpoint / n)),
    )


def megatron_kind(iter_dir: Path) -> str:
    """The layout of a Megatron iteration dir: Megatron-Bridge writes train_state.pt and
    run_config.yaml into every iteration dir (and latest_train_state.pt beside them);
    Megatron-LM writes none of them. A run's refusal to choose among its step dirs asks too,
    to name the tracker Bridge would have written."""
    bridge_files = (BRIDGE_TRAIN_STATE_FILE, BRIDGE_RUN_CONFIG_FILE)
    if any(is_file(iter_dir / name) for name in bridge_files) or is_file(
        iter_dir.parent / BRIDGE_TRACKER_FILE
    ):
        return MEGATRON_BRIDGE
    return MEGATRON_LM


def _bridge_hf_export(iter_dir: Path) -> Path | None:
    """Megatron-Bridge's Hugging Face export of this step (`also_save_hf_checkpoint`:
    iter_N/hf/, its config.json and tokenizer written from the model the run started from,
    beside the weights) when it holds a config.json: the run's own Hugging Face config, as
    verl's huggingface/ is, so nothing needs deriving. A PEFT run's hf/ holds an adapter
    (adapter_config.json) and no config.json: not one."""
    hf = iter_dir / BRIDGE_HF_EXPORT_DIR
    return hf if is_dir(hf) and is_file(hf / HF_CONFIG_FILE) else None


def _role_paths(
    dcp: Path, role_dir: Path, kind: str, hf_dir: Path | None, role: str | None
) -> CheckpointPaths:
    if role is not None and role != role_dir.name:
        raise CheckpointPathError(
            f"{role_dir}: is the {role_dir.name}'s checkpoint, not the {role}'s"
        )
    step = role_dir.parent
    is_step = parse_step_dir_name(step.name) is not None
    return CheckpointPaths(
        dcp,
        step if is_step else None,
        step.parent if is_step else None,
        kind,
        role=role_dir.name,
        roles=(role_dir.name,),
        hf_dir=hf_dir,
    )
