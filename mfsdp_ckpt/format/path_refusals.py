"""What a path that names no readable checkpoint is, in one line that says what to give.

A missing path, a file a checkpoint holds, an unfinished save, a URL, a run with no step
saved yet, a dir inside a checkpoint, a piece linked out of it: resolution refuses each
through here, so every command that reads a checkpoint names the same cause and the same
path to give instead.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpError, MfsdpUsageError
from mfsdp_ckpt.format import hf_trainer
from mfsdp_ckpt.format.closest_path import missing_hint
from mfsdp_ckpt.format.dir_entries import children, is_dir, is_file, unreadable
from mfsdp_ckpt.format.foreign_formats import (
    peft_adapter_line,
    refuse_foreign_format,
    verl_v2_mbridge_save,
)
from mfsdp_ckpt.format.layout import (
    BRIDGE_HF_EXPORT_DIR,
    BRIDGE_RUN_CONFIG_FILE,
    BRIDGE_TRACKER_FILE,
    BRIDGE_TRAIN_STATE_FILE,
    DCP_METADATA_FILE,
    DIST_CKPT_DIR,
    HF_ASSETS_DIR,
    ITER_DIR_RE,
    MANIFEST_FILE,
    MEGATRON_ITER_PREFIX,
    ROLES,
    RUN_CONFIG_FILE,
    RUN_METRICS_FILE,
    STEP_DIR_PREFIX,
    TRACKER_FILE,
    VERL_CONTENTS_FILE,
    VERL_MODEL_DIR,
    CheckpointPathError,
    CheckpointPaths,
    ForeignFormatError,
    IncompleteCheckpointError,
    iter_step,
    looks_like_hf_model,
    parse_step_dir_name,
)
from mfsdp_ckpt.format.path_urls import url_refusal
from mfsdp_ckpt.format.run_steps import steps_here
from mfsdp_ckpt.format.verl_contents import VerlHfModelOnlyError, hf_model_only
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.lock_holder import lock_holder
from mfsdp_ckpt.storage.output_pending import output_pending
from mfsdp_ckpt.storage.tensorstore_store import URL_SCHEMES


def refuse_pieces_linked_out(given: Path, paths: CheckpointPaths) -> None:
    """Every read stays inside the checkpoint's root (the step dir), its files checked one by
    one against it; but a `dist_ckpt/` that is itself a link out of its step moved that check
    along with it (export read the outside DCP while validate's manifest check refused it),
    and a step dir linked out of the run dir a user named was read from elsewhere by both.
    The root itself may be a link when the user names it (or a DCP dir in it) directly."""
    root = paths.root
    container = given if given != root and root.is_relative_to(given) else root
    for piece in (root, paths.dist_ckpt, paths.optimizer_dcp):
        if piece is not None:
            safe_files.resolve_inside(piece, container, within=str(container))


def refuse_url(path: str | os.PathLike) -> None:
    """CheckpointPathError for a URL given where a local path is read: Path() would make
    gs://b/x the local gs:/b/x, and "no such file" would follow. A `file:` URL names a
    local directory already: copying it (gcloud, aws) was the wrong advice."""
    refusal = url_refusal(str(path), _remote_advice(str(path)))
    if refusal is not None:
        raise CheckpointPathError(refusal)


# How to copy a checkpoint at a URL of each scheme to a local directory.
_COPY_COMMANDS = {
    "gs": "gcloud storage cp -r {url} DIR",
    "s3": "aws s3 cp --recursive {url} DIR",
    "hdfs": "hdfs dfs -get {url} DIR",
}
_HUB_SCHEME = "hf://"


def _remote_advice(url: str) -> str:
    """What to do with a URL, by its scheme: export-hf reads the URL_SCHEMES itself (it alone
    reaches here for another scheme, so "only export-hf reads URLs" was false there), any
    other scheme is read by no command; either way, the command that copies it (for a Hub
    `hf://` URL, `hf download`)."""
    if url.lower().startswith(_HUB_SCHEME):
        return _hub_download(url[len(_HUB_SCHEME) :])
    scheme = url.split(":", 1)[0].lower()
    command = _COPY_COMMANDS.get(scheme)
    how = f" (`{command.format(url=url)}`)" if command else ""
    copy = f"copy it to a local directory first{how} and give that"
    if f"{scheme}://" in URL_SCHEMES:
        return (
            f"only `mfsdp ckpt export-hf` reads checkpoints at URLs ({', '.join(URL_SCHEMES)});"
            f" for this, {copy}"
        )
    return (
        f"mfsdp reads no {scheme}:// URL (`mfsdp ckpt export-hf` reads {', '.join(URL_SCHEMES)});"
        f" {copy}"
    )


def _hub_download(repo: str) -> str:
    """The `hf download` line for an `hf://[datasets/]owner/name` URL: mfsdp downloads nothing."""
    kind = ""
    if repo.startswith("datasets/"):
        repo, kind = repo.removeprefix("datasets/"), " --repo-type dataset"
    name = repo.rstrip("/").rsplit("/", 1)[-1] or "DIR"
    return (
        "a Hugging Face Hub URL: nothing is downloaded here, so fetch it first"
        f" (`hf download {repo.rstrip('/')}{kind} --local-dir {name}`) and give {name}"
    )


def missing_dcp(dcp: Path) -> MfsdpUsageError | IncompleteCheckpointError:
    """The error for a layout's dist_ckpt/ without `.metadata`: verl saved only Hugging
    Face weights (usage: read those instead), or it is one of the parts verl v2 leaves
    empty by design (`_verl_v2_part_in_model`), else a save that did not finish (exit 1)."""
    hf_only = verl_hf_model_only(dcp.parent)
    if dcp.name == DIST_CKPT_DIR and hf_only is not None:
        return hf_only
    count = len(children(dcp)) if is_dir(dcp) else 0
    in_model = _verl_v2_part_in_model(dcp) if count == 0 else None
    if in_model is not None:
        return CheckpointPathError(in_model)
    held = "not there" if not is_dir(dcp) else "empty" if count == 0 else f"{count} file(s)"
    return IncompleteCheckpointError(
        f"{dcp}: {held}, no {DCP_METADATA_FILE}: this save did not finish or wrote nothing"
    )


def _verl_v2_part_in_model(dcp: Path) -> str | None:
    """For an empty `optimizer/dist_ckpt` or `extra/dist_ckpt` of a finished verl v2 save
    (its `ckpt_contents.json`, written last, beside them, and `model/dist_ckpt/.metadata`
    there), where that state is and what to give, in one line; None for anything else. verl
    v2 with Megatron-FSDP keeps model, optimizer, scheduler and RNG in model/dist_ckpt and
    leaves these dirs empty, though ckpt_contents.json lists them: a user checking the
    optimizer gives optimizer/, and "this save did not finish" called a good save broken.
    A save stopped before ckpt_contents.json, or before the model's `.metadata`, keeps
    that line."""
    part = dcp.parent
    holder = part.parent  # verl's role dir, or an SFT step (no role level)
    model = holder / VERL_MODEL_DIR / DIST_CKPT_DIR
    if dcp.name != DIST_CKPT_DIR or part.name == VERL_MODEL_DIR:
        return None
    if not (is_file(holder / VERL_CONTENTS_FILE) and is_file(model / DCP_METADATA_FILE)):
        return None
    return (
        f"{dcp}: empty, as verl v2 with Megatron-FSDP leaves it: that save keeps its"
        f" {part.name} state in {model} ({VERL_CONTENTS_FILE}, written last, is there: the"
        f" save finished); give {holder}"
    )


def hf_model_dir_refusal(given: Path) -> CheckpointPathError:
    """The refusal of a Hugging Face model dir (config.json and weights) given where a
    training checkpoint is read: a step's own export (`_step_export_of`) named as that,
    with the checkpoint to give; any other, how to make a checkpoint from it. Told to
    import-hf Megatron-Bridge's iter_N/hf/, the user made a new checkpoint of weights
    whose training checkpoint lay one level up."""
    export = _step_export_of(given)
    if export is not None:
        writer, checkpoint, step, dcp = export
        of_step = f" of step {step}" if step is not None else ""
        head = f"{given}: {writer}'s Hugging Face export{of_step} (already Hugging Face weights"
        if _foreign_format_line(dcp) is not None:  # a checkpoint mfsdp does not read
            return CheckpointPathError(
                f"{head}: give model.path={given}, or load it with transformers); mfsdp does"
                f" not read the checkpoint beside it ({checkpoint}: validate says what it is)"
            )
        return CheckpointPathError(
            f"{head}, to load as a model); its training checkpoint is {checkpoint}: give that"
            " to validate or export the checkpoint"
        )
    return CheckpointPathError(
        f"{given}: a Hugging Face model dir, not a training checkpoint"
        f" (to make one from it: mfsdp ckpt import-hf {given} --out DIR)"
    )


def _step_export_of(hf: Path) -> tuple[str, Path, int | None, Path] | None:
    """(writer, checkpoint dir, step, its DCP dir) where `hf` is the Hugging Face export a
    training checkpoint saves inside itself, else None: Megatron-Bridge's `iter_N/hf/`
    (also_save_hf_checkpoint) where iter_N holds its `.metadata` (a step pruned to its
    export is no checkpoint), and verl's `huggingface/` beside a dist_ckpt/ that holds its
    `.metadata` (a role dir or SFT step; v2's `model/huggingface/`, whose checkpoint is the
    role dir holding ckpt_contents.json, its DCP `model/dist_ckpt/` or, saved by mbridge,
    `optimizer/dist_ckpt/`). A few entries are looked at, no more."""
    parent = hf.parent
    if hf.name == BRIDGE_HF_EXPORT_DIR and ITER_DIR_RE.match(parent.name):
        if not os.path.lexists(parent / DCP_METADATA_FILE):
            return None  # its checkpoint pruned (or never finished): the export stands alone
        return "Megatron-Bridge", parent, iter_step(parent.name), parent
    if hf.name != HF_ASSETS_DIR:
        return None
    checkpoint = parent.parent if parent.name == VERL_MODEL_DIR else parent
    if checkpoint != parent and not is_file(checkpoint / VERL_CONTENTS_FILE):
        return None  # v2 writes ckpt_contents.json last: a save that did not finish
    dcp = parent / DIST_CKPT_DIR
    if not os.path.lexists(dcp / DCP_METADATA_FILE):
        mbridge = verl_v2_mbridge_save(checkpoint) if checkpoint != parent else None
        if mbridge is None:
            return None
        dcp = mbridge[0]  # v2 mbridge: the model is this export; the DCP holds the rest
    names = (checkpoint.name, checkpoint.parent.name)  # an SFT step, or a role's step
    step = next((n for n in map(parse_step_dir_name, names) if n is not None), None)
    return "verl", checkpoint, step, dcp


def verl_hf_model_only(role_dir: Path) -> VerlHfModelOnlyError | None:
    """For a verl step (or role dir) saved with `save_contents=[hf_model]` alone: a full
    Hugging Face model in huggingface/ and no dist_ckpt model state, the model dir to give
    instead (it was "not a checkpoint (looked for ...)", or "empty: did not finish").
    A v2 `model/` beside the `optimizer/` (or `extra/`) dist_ckpt verl's mbridge save wrote is named
    as that save (`verl_v2_mbridge_save`): its resume state is on disk. None where
    `role_dir` holds no such model."""
    hf = role_dir / HF_ASSETS_DIR
    if not (is_dir(hf) and looks_like_hf_model(children(hf))):
        return None
    mbridge = verl_v2_mbridge_save(role_dir.parent) if role_dir.name == VERL_MODEL_DIR else None
    if mbridge is not None:
        state, line = mbridge
        return VerlHfModelOnlyError(f"{state}: {line}")
    return hf_model_only(role_dir, hf, "save_contents=[hf_model]")


def check_is_dir(given: Path) -> None:
    """CheckpointPathError unless `given` is a directory: missing (with what was meant), a
    link loop, or a file (with the dir that holds it); a failed read where it is unreadable."""
    try:
        mode = os.stat(given).st_mode
    except FileNotFoundError:
        raise CheckpointPathError(f"{given}: no such file or directory{_meant(given)}") from None
    except PermissionError as err:  # a parent dir this user may not enter
        raise unreadable(given, "cannot open", err) from None
    except OSError as err:  # ELOOP (symlink loop), ENAMETOOLONG (a 1,500-deep chain)
        reason = "symlink loop" if err.errno == errno.ELOOP else (err.strerror or str(err))
        raise CheckpointPathError(f"{cut_to(str(given), 200)}: cannot open ({reason})") from None
    if not stat.S_ISDIR(mode):
        raise CheckpointPathError(
            f"{given}: not a directory (give a run, step or dist_ckpt dir{_holding_dir(given)})"
        )


# Files of a checkpoint (and of its run dir) that tab completion hands out in place of
# the directory that holds them.
_CHECKPOINT_FILES = (
    TRACKER_FILE,
    DCP_METADATA_FILE,
    MANIFEST_FILE,
    VERL_CONTENTS_FILE,
    BRIDGE_TRACKER_FILE,
    BRIDGE_TRAIN_STATE_FILE,
    BRIDGE_RUN_CONFIG_FILE,
    hf_trainer.TRAINER_STATE_FILE,
)


# verl's files beside its dist_ckpt/: a role dir's record of the model's settings
# (convert/verl_record.py reads it), and a step's dataloader state (data.pt for RL,
# data_<rank>.pt for SFT), told by the step dir's name that holds it.
_VERL_RECORD_FILE = "transformer_config.json"
_VERL_DATALOADER_RE = re.compile(r"data(_[0-9]+)?\.pt\Z")


def _holding_dir(given: Path) -> str:
    """`: PARENT holds it` for a file a checkpoint or run dir holds (`RUN/latest_...txt`,
    `dist_ckpt/.metadata`, a `.distcp`, Bridge's run_config.yaml, verl's
    transformer_config.json and a step's data.pt), else nothing: the dir to give instead."""
    in_step = parse_step_dir_name(given.parent.name) is not None
    if (
        given.name in _CHECKPOINT_FILES
        or given.suffix == ".distcp"
        or given.name == _VERL_RECORD_FILE
        or (in_step and _VERL_DATALOADER_RE.match(given.name) is not None)
    ):
        return f": {given.parent} holds it"
    return ""


def _meant(given: Path) -> str:
    """Where a relative path was read from and `; did you mean runs/demo/sft?` for a
    mistyped path (`missing_hint`), and the step dirs there when the mistyped name is one
    (`global_step_81`); for a path whose lock a live process holds, that it is on its way
    (`output_pending`)."""
    pending = output_pending(given)
    if pending is not None:
        return f"; {pending}"
    hint = missing_hint(given)
    if parse_step_dir_name(given.name) is not None and given.parent.is_dir():
        hint += steps_here(given.parent)
    return hint


def not_a_checkpoint(given: Path) -> CheckpointPathError:
    """The error for a dir that is no checkpoint: a run with none saved yet, a PEFT adapter
    dir (`peft_adapter_line`), or else what was looked for and, for a dir inside a
    checkpoint, the checkpoint to give."""
    unsaved = _run_without_steps(given)
    if unsaved is not None:
        return CheckpointPathError(
            f"{given}: is a training run with no checkpoint saved yet{unsaved}"
        )
    adapter = peft_adapter_line(given)
    if adapter is not None:
        return CheckpointPathError(adapter)
    hf_only = verl_hf_model_only(given)
    if hf_only is not None:
        return hf_only
    return CheckpointPathError(
        f"{given}: not a checkpoint (looked for {DCP_METADATA_FILE}, {DIST_CKPT_DIR}/, "
        f"{'/ '.join(ROLES)}/, {VERL_MODEL_DIR}/{DIST_CKPT_DIR}/, {TRACKER_FILE}, "
        f"{STEP_DIR_PREFIX}N/, {MEGATRON_ITER_PREFIX}NNNNNNN/, {hf_trainer.MODEL_DCP_PREFIX}0/,"
        f" checkpoint-N/, {hf_trainer.ACCELERATE_CHECKPOINTS_DIR}/checkpoint_N/)"
        f"{_inside_a_checkpoint(given)}"
    )


def _run_without_steps(given: Path) -> str | None:
    """For a training run's dir that holds no step yet, `""` or ` (pid N is training it
    now)` when a live process holds its lock; None for anything else. A run is known by
    its config.yaml or metrics.jsonl (written as it starts), or, empty still, by its lock
    held (`mfsdp data` holds one on a dir it fills with sft/ and rl/ at once). The lock
    file, beside the dir, is not opened: the kernel's list of locks says who holds it."""
    marked = holds_run_records(given)
    pid = lock_holder(given)
    if not marked and (pid is None or children(given)):
        return None
    if pid is None:
        return ""
    return f" (pid {pid} is training it now)" if pid else " (a process is training it now)"


def holds_run_records(run: Path) -> bool:
    """`run` holds the config.yaml or metrics.jsonl an mfsdp training run writes as it
    starts: a dir of ours, whatever its step dirs look like."""
    return is_file(run / RUN_CONFIG_FILE) or is_file(run / RUN_METRICS_FILE)


def _inside_a_checkpoint(given: Path) -> str:
    """`; it lies in the checkpoint STEP: give that` for a directory inside a checkpoint that
    holds no weights (its `huggingface/`: config and tokenizer; verl's `actor/huggingface/`),
    where the list of what was looked for alone left the user to work out the level. A
    checkpoint in a format mfsdp does not read (verl's FSDP backend, whose actor/ holds the
    per-rank shards; Megatron's torch_dist) is named by its own refusal, which says what
    converts it: pointed at nothing, or told to give that checkpoint, the user was refused
    next."""
    from mfsdp_ckpt.storage.safetensors_source import unread_checkpoint_refusal

    parent = given.parent
    for _ in range(2):  # huggingface/ in a step, or in verl's role dir of a step
        if parent == parent.parent:
            break
        unread = _foreign_format_line(parent)
        if unread is None and (
            is_dir(parent / DIST_CKPT_DIR) or is_file(parent / DCP_METADATA_FILE)
        ):
            unread = unread_checkpoint_refusal(parent)
            if unread is None:
                return f"; it lies in the checkpoint {parent}: give that"
        if unread is not None:
            return f"; it lies in {unread}"
        parent = parent.parent
    return ""


def _foreign_format_line(directory: Path) -> str | None:
    """The refusal of `directory` when its own files are those of a format mfsdp does not
    read (`refuse_foreign_format`: verl FSDP shards, ...), else None (one it cannot list too:
    the dir given is what is refused)."""
    try:
        refuse_foreign_format(directory, children(directory))
    except ForeignFormatError as err:
        return str(err)
    except MfsdpError:
        return None
    return None
