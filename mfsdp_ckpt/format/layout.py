"""The one place that decides where a checkpoint's files live on disk.

mfsdp writes a run directory with one sub-directory per saved step plus a tracker file::

    <run_dir>/
        latest_checkpointed_iteration.txt   # newest *complete* step (verl's name)
        global_step_<N>/
            dist_ckpt/        # torch.distributed.checkpoint: .metadata + __<rank>_<i>.distcp
            huggingface/      # config.json, tokenizer files, generation_config.json
            manifest.json     # written last: its presence marks the step complete

and reads, besides its own, the layouts verl and Megatron-LM write (docs/interop.md)::

    verl RL v1    RUN/global_step_N/{data.pt, actor/{dist_ckpt/, huggingface/}, critic/...}
    verl RL v2    RUN/global_step_N/actor/{ckpt_contents.json, model/{dist_ckpt/, huggingface/},
                  optimizer/dist_ckpt/, extra/dist_ckpt/}
    verl SFT      RUN/global_step_N/{dist_ckpt/, huggingface/, data_<rank>.pt}
    verl SFT v2   RUN/global_step_N/{ckpt_contents.json, model/{dist_ckpt/, huggingface/},
                  optimizer/dist_ckpt/, extra/dist_ckpt/, data_<rank>.pt}
    Megatron-LM   RUN/iter_0000100/{.metadata, *.distcp} (tracker "100" or "release")
    Megatron-Bridge  RUN/{latest_train_state.pt, latest_checkpointed_iteration.txt,
                  iter_0000100/{.metadata, *.distcp, train_state.pt, run_config.yaml, tokenizer/,
                  hf/ (also_save_hf_checkpoint)}}
    HF Trainer    OUTPUT/checkpoint-N/{pytorch_model_fsdp_0/, optimizer_0/, trainer_state.json,
                  config.json and tokenizer (older transformers), ...} (format/hf_trainer.py)

This module names the pieces of each layout: the files and dirs, the layout kinds, the
step dir names, the errors about paths, and `CheckpointPaths`, the value that says where
one checkpoint's pieces are. The saver, the reader, validate and export all take these
names from here, so the layouts are decided in exactly one place; reading a given path as
one of them is `checkpoint_resolution`'s job, our run dir's steps and trackers
`run_steps`'.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.format import hf_trainer
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE

TRACKER_FILE = "latest_checkpointed_iteration.txt"
STEP_DIR_PREFIX = "global_step_"
DIST_CKPT_DIR = "dist_ckpt"
HF_ASSETS_DIR = "huggingface"
MANIFEST_FILE = "manifest.json"
DCP_METADATA_FILE = ".metadata"
TMP_STEP_SUFFIX = ".tmp"
# What a training run's dir holds before its first save: the config it runs with and its
# metrics (trainer.config and trainer.metrics take these names from here)
RUN_CONFIG_FILE = "config.yaml"
RUN_METRICS_FILE = "metrics.jsonl"

# verl and Megatron-LM names
MEGATRON_ITER_PREFIX = "iter_"
MEGATRON_RELEASE_DIR = "release"
# Megatron-LM's and Megatron-Bridge's `_NON_PERSISTENT_CKPT_SUBDIR`: where a save with
# --non-persistent-ckpt-type global goes unless --non-persistent-global-ckpt-dir says
NON_PERSISTENT_DIR = "non_persistent"
VERL_CONTENTS_FILE = "ckpt_contents.json"
VERL_MODEL_DIR = "model"
VERL_PEFT_ADAPTER_DIR = "adapter"  # model/huggingface/adapter/: mbridge's save_hf_adapter
VERL_FSDP_LORA_DIR = "lora_adapter"  # actor/lora_adapter/: verl's FSDP backend
# Megatron-Bridge (megatron/bridge/training/utils/checkpoint_utils.py): its tracker, read
# before latest_checkpointed_iteration.txt, is a torch.save of the train state.
BRIDGE_TRACKER_FILE = "latest_train_state.pt"
BRIDGE_TRAIN_STATE_FILE = "train_state.pt"
BRIDGE_RUN_CONFIG_FILE = "run_config.yaml"
BRIDGE_TOKENIZER_DIR = "tokenizer"
BRIDGE_HF_EXPORT_DIR = "hf"  # checkpointing.py HF_WEIGHTS_SUBDIR (also_save_hf_checkpoint)
BRIDGE_TRACKER_MAX_BYTES = 1 << 20  # about 2 KB: eight 0-dim tensors
ROLES = ("actor", "critic")
DEFAULT_ROLE = "actor"
# layout kinds, as reported by inspect/validate and named in docs/interop.md
MFSDP, VERL_RL_V1, VERL_RL_V2, VERL_SFT, VERL_SFT_V2, MEGATRON_LM, MEGATRON_BRIDGE, BARE_DCP = (
    "mfsdp",
    "verl-rl-v1",
    "verl-rl-v2",
    "verl-sft",
    "verl-sft-v2",
    "megatron-lm",
    "megatron-bridge",
    "dist_ckpt",
)
HF_TRAINER = hf_trainer.KIND

TRACKER_MAX_BYTES = 64  # "release" or a step number, with slack for a newline
CONTENTS_MAX_BYTES = 1 << 20  # ckpt_contents.json: a few hundred bytes in practice
MAX_RUNS_LISTED = 8

# verl and mfsdp write global_step_N unpadded: `global_step_06` is no step dir (a hand-made
# copy taken for step 6 counted that step twice, and keep_last removed the real one);
# Megatron's iter_0000006 is zero-padded by design (ITER_DIR_RE)
_STEP_NUMBER = r"(0|[1-9][0-9]{0,17})"
_STEP_DIR_RE = re.compile(rf"^{STEP_DIR_PREFIX}{_STEP_NUMBER}\Z")
TMP_STEP_RE = re.compile(rf"^{STEP_DIR_PREFIX}{_STEP_NUMBER}{re.escape(TMP_STEP_SUFFIX)}\Z")
ITER_DIR_RE = re.compile(rf"^{MEGATRON_ITER_PREFIX}([0-9]{{7,18}})\Z")
_HF_WEIGHT_SUFFIXES = (".safetensors", ".bin")


class CheckpointPathError(MfsdpUsageError, ValueError):
    """A path given by the user does not name a checkpoint; the message says why."""


class ForeignFormatError(CheckpointPathError):
    """A checkpoint in a format mfsdp does not read (Megatron's torch_dist or legacy torch,
    verl's FSDP backend); the message says what it is and what reads it."""


class DamagedRunDirError(MfsdpFailedError, ValueError):
    """A run dir (it has a tracker, or step dirs) whose tracker is unreadable or names no
    step dir here, or whose saves never finished: the data is broken, not the request, so
    exit 1 (a path that is no checkpoint at all is a CheckpointPathError, exit 2)."""


class DamagedTrackerError(DamagedRunDirError):
    """A run dir's tracker (the file naming the step its trainer resumes) that cannot be
    read, names no step dir here or names a save that did not finish
    (`UnfinishedTrackedStepError`), or the Hugging Face Trainer's trainer_state.json that
    a checkpoint-N resumes from. `tracker` is that file and `run` the dir holding the steps
    (the tracker's own dir where not given): a reader names the file as what failed, and
    can still offer the run's complete steps, any of which reads alone (a refusal of the
    whole run dir sent users to think no step of it was sound)."""

    def __init__(self, message: str, tracker: Path, run: Path | None = None) -> None:
        super().__init__(message)
        self.tracker = tracker
        self.run = tracker.parent if run is None else run

    def __reduce__(self):  # raised in a worker, it crosses back whole, tracker included
        return type(self), (str(self), self.tracker, self.run)


class IncompleteCheckpointError(MfsdpFailedError, ValueError):
    """A recognised layout whose dist_ckpt/ holds no `.metadata` (a save that did not
    finish, or verl's manifest naming empty dirs), or a Megatron torch_dist save without
    the metadata.json it writes last: a damaged checkpoint, exit 1."""


class UnfinishedTrackedStepError(DamagedTrackerError, IncompleteCheckpointError):
    """A tracker naming a step dir whose save did not finish (empty, or without the file
    its save writes last), in any layout: an incomplete checkpoint, and a failed tracker,
    so validate offers the complete steps beside it. An empty verl step was "not a
    checkpoint" (exit 2), and Megatron's was said as the step's damage alone."""


def step_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / f"{STEP_DIR_PREFIX}{step}"


def tmp_step_dir(run_dir: str | os.PathLike, step: int) -> Path:
    """Sibling of the final step dir; a save is built here and renamed when complete."""
    return Path(run_dir) / f"{STEP_DIR_PREFIX}{step}{TMP_STEP_SUFFIX}"


def parse_step_dir_name(name: str) -> int | None:
    """The step of a `global_step_N` name, None for any other name (`global_step_06` too:
    only the name `step_dir` gives step 6 is step 6's)."""
    match = _STEP_DIR_RE.match(name)
    return int(match.group(1)) if match else None


def is_megatron_step_name(name: str) -> bool:
    """Whether `name` is Megatron's step dir name: `iter_NNNNNNN` or `release`."""
    return bool(ITER_DIR_RE.match(name)) or name == MEGATRON_RELEASE_DIR


@dataclass(frozen=True)
class CheckpointPaths:
    """Where one checkpoint's pieces are.

    `kind` names the layout (MFSDP, VERL_RL_V1, ...); `step_dir` is None for a bare
    dist_ckpt dir; `hf_dir` is the huggingface/ beside the dist_ckpt when there is one;
    `role` is verl's actor/critic; `note` is what the caller should tell the user about
    how the path was read (e.g. a parent dir that holds one run), or None.
    Megatron-Bridge's iteration dir also names its `run_config` and `tokenizer_dir`.
    The HF Trainer keeps the optimizer state in a DCP dir of its own (`optimizer_dcp`),
    records the step in trainer_state.json (`recorded_step`, which wins over the dir's
    name) and saves config and tokenizer beside its own files, which `hf_skip` names:
    entries of `hf_dir` that are not Hugging Face files.
    """

    dist_ckpt: Path
    step_dir: Path | None = None
    run_dir: Path | None = None
    kind: str = BARE_DCP
    role: str | None = None
    roles: tuple[str, ...] = ()
    hf_dir: Path | None = None
    note: str | None = None
    optimizer_dcp: Path | None = None
    recorded_step: int | None = None
    hf_skip: tuple[str, ...] = ()

    @property
    def has_manifest(self) -> bool:
        return self.kind == MFSDP

    @property
    def manifest(self) -> Path | None:
        """mfsdp's manifest.json; None for layouts that have none (verl, Megatron-LM)."""
        return self.step_dir / MANIFEST_FILE if self.has_manifest and self.step_dir else None

    @property
    def hf_assets(self) -> Path | None:
        return self.hf_dir

    @property
    def run_config(self) -> Path | None:
        """Megatron-Bridge's run_config.yaml (the model provider's settings), if saved."""
        if self.kind != MEGATRON_BRIDGE or self.step_dir is None:
            return None
        path = self.step_dir / BRIDGE_RUN_CONFIG_FILE
        return path if os.path.lexists(path) else None

    @property
    def tokenizer_dir(self) -> Path | None:
        """The tokenizer files Megatron-Bridge saves into the iteration dir (by default):
        whatever is there under that name, so that a symlink or a file there is refused
        by the reader, not silently taken for "no tokenizer"."""
        if self.kind != MEGATRON_BRIDGE or self.step_dir is None:
            return None
        path = self.step_dir / BRIDGE_TOKENIZER_DIR
        return path if os.path.lexists(path) else None

    @property
    def step(self) -> int | None:
        if self.recorded_step is not None:
            return self.recorded_step
        if self.step_dir is None:
            return None
        step = parse_step_dir_name(self.step_dir.name)
        return step if step is not None else iter_step(self.step_dir.name)

    @property
    def root(self) -> Path:
        """The outermost directory of this one checkpoint: reads must stay inside it."""
        if self.step_dir is not None:
            return self.step_dir
        if self.hf_dir is not None:
            return Path(os.path.commonpath([self.dist_ckpt, self.hf_dir]))
        return self.dist_ckpt


def iter_step(name: str) -> int | None:
    """The step of Megatron's `iter_NNNNNNN` name, None for any other name."""
    match = ITER_DIR_RE.match(name)
    return int(match.group(1)) if match else None


def looks_like_hf_model(names: list[str]) -> bool:
    """Whether a dir holding `names` is a Hugging Face model dir: config.json and weights (not
    the .bin files the HF Trainer keeps beside config.json in its checkpoint-N)."""
    return HF_CONFIG_FILE in names and any(
        n.endswith(_HF_WEIGHT_SUFFIXES) and not hf_trainer.not_model_weights(n) for n in names
    )


def noted(
    paths: CheckpointPaths, *notes: str | None, run_dir: Path | None = None
) -> CheckpointPaths:
    """`paths` with `notes` added after the note it already carries: each level of a path
    read (a run, its tracked step, a migrated role dir) may have something to say, and a
    level above replacing the note below lost it. `run_dir`: the run the step was read
    from, when the level that found the step knows it (kept as it was when not given)."""
    joined = "; ".join(n for n in (paths.note, *notes) if n)
    run = run_dir if run_dir is not None else paths.run_dir
    return replace(paths, note=joined or None, run_dir=run)
