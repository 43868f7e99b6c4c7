"""The names Hugging Face's Trainer and Accelerate give an FSDP checkpoint, and its step.

With `fsdp_state_dict_type: SHARDED_STATE_DICT` (what TRL's trainers run with FSDP too),
`Trainer._save_checkpoint` writes `OUTPUT/checkpoint-<global_step>/` and Accelerate's
`save_fsdp_model` / `save_fsdp_optimizer` (accelerate/utils/fsdp_utils.py) put two DCP
dirs in it::

    OUTPUT/checkpoint-N/
        pytorch_model_fsdp_0/   # dcp.save({"model": state_dict}): keys model.<HF name>
        optimizer_0/            # dcp.save({"optimizer": ...}): optimizer.state.<HF name>.exp_avg
        trainer_state.json      # its "global_step" is the step the Trainer resumes at
        scheduler.pt, rng_state_<rank>.pth, ...

`_0` is the index of the model (and of the optimizer) Accelerate prepared: a run with two
models has `pytorch_model_fsdp_1/` too. `resume_from_checkpoint=True` takes the
checkpoint-N with the largest N (transformers' `get_last_checkpoint`). The Trainer writes
`config.json` and tokenizer files into checkpoint-N only where its `save_model` calls
`_save` (transformers releases around 4.35 did so with FSDP); later ones save nothing
but the FSDP state there with SHARDED_STATE_DICT. With FULL_STATE_DICT the checkpoint is
a Hugging Face model dir (`config.json`, `model.safetensors`).
Accelerate's own `save_state()` with `ProjectConfiguration(automatic_checkpoint_naming=True)`
saves the same dirs into `PROJECT/checkpoints/checkpoint_<i>/` (an underscore; `i` counts
its saves, not steps), and `load_state()` with no dir resumes the one with the largest `i`
(`newest_accelerate_save`).
`mfsdp_ckpt.format.checkpoint_resolution` decides what each level resolves to; this
module only knows the names and reads trainer_state.json.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.model_files import ADAPTER_CONFIG_FILE
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.unique_json import loads_object

KIND = "hf-trainer"
MODEL_DCP_PREFIX = "pytorch_model_fsdp_"  # accelerate's FSDP_MODEL_NAME + "_<model index>"
OPTIMIZER_DCP_PREFIX = "optimizer_"  # OPTIMIZER_NAME + "_<optimizer index>"
OPTIMIZER_ENTRY = "optimizer."  # save_fsdp_optimizer's one top-level key in optimizer_K/
TRAINER_STATE_FILE = "trainer_state.json"
# The Trainer's own records beside config and tokenizer (TRL's GRPO adds the second):
# JSON files that are no Hugging Face asset, never copied into an export.
TRAINER_FILES = (TRAINER_STATE_FILE, "entropy_ctrl_state.json")
# A trainer_state.json grows by one log_history record per logging step (a GRPO run with
# logging_steps=1 writes about 1.5 KB a step): a larger one is not read, the dir's N is used.
TRAINER_STATE_MAX_BYTES = 16 << 20

CHECKPOINT_DIR_RE = re.compile(r"^checkpoint-([0-9]{1,18})\Z")
# Accelerate's automatic checkpoint naming: PROJECT/checkpoints/checkpoint_<save iteration>
ACCELERATE_CHECKPOINTS_DIR = "checkpoints"
ACCELERATE_SAVE_DIR_RE = re.compile(r"^checkpoint_([0-9]{1,18})\Z")
MODEL_DCP_RE = re.compile(rf"^{MODEL_DCP_PREFIX}([0-9]{{1,9}})\Z")
OPTIMIZER_DCP_RE = re.compile(rf"^{OPTIMIZER_DCP_PREFIX}([0-9]{{1,9}})\Z")
# The files of the Trainer's and Accelerate's training state beside the model, torch.save
# pickles that hold no model weights: the Trainer's training_args.bin, optimizer.pt,
# scheduler.pt, scaler.pt, rng_state.pth (rng_state_<rank>.pth with several processes),
# Accelerate's optimizer.bin, scheduler.bin, sampler.bin. A checkpoint-N with config.json
# and these is no Hugging Face model dir, and none of them is weights to convert.
STATE_BIN_RE = re.compile(
    r"^(training_args|optimizer|scheduler|sampler|scaler|rng_state)(_[0-9]+)?\.(bin|pt|pth)\Z"
)
# Accelerate's FULL_STATE_DICT model file (`save_fsdp_model`: pytorch_model_fsdp.bin, or
# pytorch_model_fsdp_<K>.bin for its K-th model): the whole model's state dict, torch.save'd.
# It is weights, but a pickle, which mfsdp never unpickles (it can run code).
FULL_MODEL_FILE_RE = re.compile(rf"^{MODEL_DCP_PREFIX[:-1]}(_[0-9]+)?\.bin\Z")
# What holds a Trainer checkpoint's model weights: save_pretrained's files, a PEFT adapter
_MODEL_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
# Accelerate's per-rank torch.save shards: LOCAL_STATE_DICT (FSDP1), or SHARDED_STATE_DICT
# saved with use_dcp=False.
RANK_SHARD_RE = re.compile(rf"^{MODEL_DCP_PREFIX[:-1]}(_[0-9]+)?_rank[0-9]+\.bin\Z")


def not_model_weights(name: str) -> bool:
    """Whether `name` is a file the Trainer or Accelerate keeps beside config.json that
    from_pretrained does not load as the model's weights: the training state
    (`STATE_BIN_RE`) and Accelerate's FULL_STATE_DICT file (`FULL_MODEL_FILE_RE`), which
    the Trainer writes next to model.safetensors. Counting it as weights made such a
    checkpoint-N no Hugging Face model dir, and advised from_pretrained for it alone."""
    return bool(STATE_BIN_RE.match(name) or FULL_MODEL_FILE_RE.match(name))


def full_state_dict_file(names: list[str]) -> str | None:
    """`FILE: Accelerate's FULL_STATE_DICT model file ...; <what to do>` for the first of
    `names` that is one (`FULL_MODEL_FILE_RE`) when no other model weights stand beside it,
    else None. Alone, it holds the only copy of the model's weights, so "not a checkpoint"
    or "training state, no model weights" sent users away from the weights they have; it is
    never read here, only named. Beside model.safetensors (the Trainer's FULL_STATE_DICT
    save writes both) the dir is a Hugging Face model dir, read as one."""
    found = sorted(n for n in names if FULL_MODEL_FILE_RE.match(n))
    if not found or any(
        n.endswith(_MODEL_FILE_SUFFIXES) and not not_model_weights(n) for n in names
    ):
        return None
    return (
        f"{found[0]}: Accelerate's FULL_STATE_DICT model file (the whole model's state dict as"
        " a torch.save pickle, which mfsdp never unpickles); if you trust it, load it with"
        " torch.load(weights_only=True) into the transformers model and save_pretrained (a"
        f" Hugging Face model dir: {mfsdp_command('ckpt import-hf DIR --out OUT')} makes a"
        " checkpoint of it), or save the run again with SHARDED_STATE_DICT through DCP"
    )


def without_weights(names: list[str]) -> str | None:
    """`an HF Trainer checkpoint ... without the model's weights` for a dir holding `names`:
    the Trainer's trainer_state.json beside its state files and no model weights in any form
    (not copied with the rest, a partial sync, saved elsewhere); None for any other dir.
    Its optimizer.pt, scheduler.pt and rng_state.pth were named as pickled weights, with
    advice to convert them with transformers, which cannot."""
    if TRAINER_STATE_FILE not in names or ADAPTER_CONFIG_FILE in names:
        return None
    weights = [
        n
        for n in names
        if (n.endswith(_MODEL_FILE_SUFFIXES) and not STATE_BIN_RE.match(n)) or MODEL_DCP_RE.match(n)
    ]
    if weights:
        return None
    records = [TRAINER_STATE_FILE, *sorted(n for n in names if STATE_BIN_RE.match(n))]
    return (
        f"an HF Trainer checkpoint ({first_of(records, 4)}: the Trainer's training state, no"
        " model weights) without the model's weights (model.safetensors, or"
        f" {MODEL_DCP_PREFIX}0/ with FSDP): copy them in from where the run saved them, or"
        " give a dir that holds them"
    )


def checkpoint_number(name: str) -> int | None:
    """N of a `checkpoint-N` dir name, else None."""
    match = CHECKPOINT_DIR_RE.match(name)
    return int(match.group(1)) if match else None


def newest_accelerate_save(given: Path, names: list[str]) -> tuple[Path, str] | None:
    """(the save, a note) where `given`, holding `names`, is the `checkpoints/` folder of
    Accelerate's automatic checkpoint naming, or the project dir holding it: its
    `checkpoint_<i>` dir with the largest i, the one `load_state()` resumes (accelerator.py
    sorts them by the number in the name), and a note naming it and the others. None where
    it holds no such dir. Each save read fine given, but the folder and the project were
    "not a checkpoint", with a "looked for" line naming the Trainer's checkpoint-N only."""
    folder, entries = given, names
    if not any(ACCELERATE_SAVE_DIR_RE.match(name) for name in names):
        if ACCELERATE_CHECKPOINTS_DIR not in names:
            return None
        folder = given / ACCELERATE_CHECKPOINTS_DIR
        try:
            entries = os.listdir(folder)
        except OSError:
            return None  # no folder, or one that is not listable: not read as one
    saves = sorted(
        (int(match.group(1)), name)
        for name in entries
        if (match := ACCELERATE_SAVE_DIR_RE.match(name)) and os.path.isdir(folder / name)
    )
    if not saves:
        return None
    newest = saves[-1][1]
    note = (
        f"{newest} is the newest of Accelerate's automatic-naming saves in {folder}, the one"
        " load_state() resumes"
    )
    others = [name for _, name in reversed(saves[:-1])]
    if others:
        note += f"; other saves here: {first_of(others, 4)}"
    return folder / newest, note


def resumable_checkpoints(run: Path, names: list[str]) -> list[Path]:
    """The `checkpoint-N` dirs among `names` (entries of the Trainer's output dir `run`),
    oldest first, whose trainer_state.json is there and reads (`recorded_step`) and whose
    model DCP dirs each hold their `.metadata` (written last by a DCP save): those
    resume_from_checkpoint resumes, which a refusal of a damaged one offers instead. One
    whose model save did not finish was offered, and refused when given."""
    found = []
    for name in sorted(names, key=lambda n: checkpoint_number(n) or -1):
        checkpoint = run / name
        if checkpoint_number(name) is None or not os.path.lexists(checkpoint / TRAINER_STATE_FILE):
            continue
        if not _model_saves_finished(checkpoint):
            continue
        try:
            recorded_step(checkpoint)
        except (CheckpointFormatError, OSError, ValueError):
            continue
        found.append(checkpoint)
    return found


def _model_saves_finished(checkpoint: Path) -> bool:
    """Whether every `pytorch_model_fsdp_K/` of `checkpoint` holds its DCP `.metadata`
    (layout's DCP_METADATA_FILE: layout reads this module, so the name is spelled here)."""
    try:
        names = os.listdir(checkpoint)
    except OSError:
        return False
    models = [name for name in names if MODEL_DCP_RE.match(name)]
    return all(os.path.lexists(checkpoint / name / ".metadata") for name in models)


def optimizer_dir(model_dcp: Path) -> Path:
    """`optimizer_K/` beside `pytorch_model_fsdp_K/`: the Trainer saves one model and one
    optimizer, both index 0."""
    match = MODEL_DCP_RE.match(model_dcp.name)
    index = match.group(1) if match else "0"
    return model_dcp.parent / f"{OPTIMIZER_DCP_PREFIX}{index}"


def model_dir_of_optimizer(optimizer_dcp: Path) -> Path | None:
    """`pytorch_model_fsdp_K/` beside an `optimizer_K/` given for the checkpoint, or None."""
    match = OPTIMIZER_DCP_RE.match(optimizer_dcp.name)
    if match is None:
        return None
    return optimizer_dcp.parent / f"{MODEL_DCP_PREFIX}{match.group(1)}"


def records_its_step(checkpoint: Path) -> bool:
    """Whether `recorded_step` reads `checkpoint`'s step from its trainer_state.json (one
    there, within TRAINER_STATE_MAX_BYTES), not from its `checkpoint-N` name alone."""
    file = checkpoint / TRAINER_STATE_FILE
    try:
        found = os.stat(file, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(found.st_mode) and found.st_size <= TRAINER_STATE_MAX_BYTES


def recorded_step(checkpoint: Path) -> tuple[int | None, str | None]:
    """(step, note): the `global_step` of `checkpoint`'s trainer_state.json, which the
    Trainer resumes at, else the N of its `checkpoint-N` name (None for another name).

    Read bounded through `safe_files` (a FIFO, a directory or a link out of the checkpoint
    is CheckpointFileError, one line); a file that is no JSON object or whose global_step
    is no integer is CheckpointFormatError (exit 1: the Trainer could not resume from it
    either). A file over TRAINER_STATE_MAX_BYTES is left unread and the note says so; so
    does a global_step that differs from N."""
    named = checkpoint_number(checkpoint.name)
    file = checkpoint / TRAINER_STATE_FILE
    if not os.path.lexists(file):
        return named, None
    size = os.stat(safe_files.regular_file(file, root=checkpoint)).st_size
    if size > TRAINER_STATE_MAX_BYTES:
        fallback = f"step {named} from the dir name" if named is not None else "no step"
        return named, (
            f"{file}: {size} bytes, more than the {TRAINER_STATE_MAX_BYTES} read for its"
            f" global_step; {fallback}"
        )
    text = safe_files.read_text(file, TRAINER_STATE_MAX_BYTES, root=checkpoint)
    state = loads_object(text, str(file), CheckpointFormatError)
    step = state.get("global_step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 10**18:
        raise CheckpointFormatError(
            f"{file}: expected an integer global_step, found {cut_to(repr(step), 40)}"
        )
    if named is not None and step != named:
        return step, (
            f"{file} says global_step {step}, the dir is {checkpoint.name}: step {step}, as the"
            " Trainer resumes"
        )
    return step, None
