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

Any level of any of them resolves (run, step, role, `model/`, `dist_ckpt/`) to a
`CheckpointPaths`. Everything else in mfsdp (the saver, the reader, validate, export) asks
this module for paths, so the layouts are decided in exactly one place. Every small file
read here (tracker, ckpt_contents.json) goes through `safe_files`: a FIFO, a huge file or
a symlink out of the checkpoint is one line, never a hang.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.format import hf_trainer
from mfsdp_ckpt.format.closest_path import missing_hint
from mfsdp_ckpt.format.path_urls import url_refusal
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.confined_stat import confined_stat
from mfsdp_ckpt.storage.lock_holder import lock_holder
from mfsdp_ckpt.storage.output_pending import output_pending
from mfsdp_ckpt.storage.tensorstore_store import URL_SCHEMES
from mfsdp_ckpt.storage.unique_json import loads_object

TRACKER_FILE = "latest_checkpointed_iteration.txt"
STEP_DIR_PREFIX = "global_step_"
DIST_CKPT_DIR = "dist_ckpt"
HF_ASSETS_DIR = "huggingface"
MANIFEST_FILE = "manifest.json"
DCP_METADATA_FILE = ".metadata"
TMP_STEP_SUFFIX = ".tmp"
# What a training run's dir holds before its first save: the config it runs with
# (trainer.config.RESOLVED_CONFIG_FILE) and its metrics (trainer.metrics.METRICS_FILE)
RUN_CONFIG_FILE = "config.yaml"
RUN_METRICS_FILE = "metrics.jsonl"

# verl and Megatron-LM names
MEGATRON_ITER_PREFIX = "iter_"
MEGATRON_RELEASE_DIR = "release"
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
# Megatron's iter_0000006 is zero-padded by design (_ITER_DIR_RE)
_STEP_NUMBER = r"(0|[1-9][0-9]{0,17})"
_STEP_DIR_RE = re.compile(rf"^{STEP_DIR_PREFIX}{_STEP_NUMBER}$")
_TMP_STEP_RE = re.compile(rf"^{STEP_DIR_PREFIX}{_STEP_NUMBER}{re.escape(TMP_STEP_SUFFIX)}$")
_ITER_DIR_RE = re.compile(rf"^{MEGATRON_ITER_PREFIX}([0-9]{{7,18}})$")
_STEP_TEXT_RE = re.compile(r"[0-9]{1,18}")  # ASCII only: "²".isdigit() is True
_HF_WEIGHT_SUFFIXES = (".safetensors", ".bin")
SAFETENSORS_INDEX = "model.safetensors.index.json"


class CheckpointPathError(MfsdpUsageError, ValueError):
    """A path given by the user does not name a checkpoint; the message says why."""


class ForeignFormatError(CheckpointPathError):
    """A checkpoint in a format mfsdp does not read (Megatron's torch_dist or legacy torch,
    verl's FSDP backend); the message says what it is and what reads it."""


class DamagedRunDirError(MfsdpFailedError, ValueError):
    """A run dir (it has a tracker, or step dirs) whose tracker is unreadable or names no
    step dir here, or whose saves never finished: the data is broken, not the request, so
    exit 1 (a path that is no checkpoint at all is a CheckpointPathError, exit 2)."""


class IncompleteCheckpointError(MfsdpFailedError, ValueError):
    """A recognised layout whose dist_ckpt/ holds no `.metadata` (a save that did not
    finish, or verl's manifest naming empty dirs): a damaged checkpoint, exit 1."""


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


def list_complete_steps(run_dir: str | os.PathLike) -> list[int]:
    """Steps whose directory holds a manifest, ascending. Temporary dirs never count."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    steps = []
    for child in run.iterdir():
        step = parse_step_dir_name(child.name)
        if step is not None and _is_file_followed(child / MANIFEST_FILE):
            steps.append(step)
    return sorted(steps)


def resume_step(run_dir: str | os.PathLike) -> int | None:
    """The step `checkpoint.resume=auto` resumes in `run_dir`: the tracker's when it names
    a complete step, else the newest complete one (the tracked step was removed, or no
    tracker was written). None only when there is nothing to resume: no tracker and no step
    dir of any layout (an unfinished save's `global_step_N.tmp/` does not count: the next
    save of that step replaces it).

    Refused (DamagedRunDirError, exit 1) where resuming would take the run dir for one with
    less in it than it holds: a tracked step that is there but incomplete (the tracker is
    written only once its step is complete, so it was damaged since) or a file; a tracker
    whose step is gone with no complete step left; and whatever this run's saves would
    replace that is no complete step (`refuse_replacing_steps`). Taken for "nothing to
    resume", a damaged only step was trained over from step 0 and overwritten. Resuming, the
    check before a run starts and the line a Ctrl-C'd run ends with all ask here, so the
    step named is the step resumed."""
    run = Path(run_dir)
    steps = list_complete_steps(run)
    resumed = _tracked_or_newest(run, read_tracker(run), steps)
    refuse_replacing_steps(run, resumed)
    return resumed


def checkpoint_to_resume(run_dir: str | os.PathLike, resume: str) -> CheckpointPaths | None:
    """The checkpoint `checkpoint.resume` names for a run in `run_dir`: `auto`, the step
    `resume_step` takes (None when there is none); `disable`, None; else the path given.
    The ranks load it and the launching process (no torch) checks it first, so both ask
    here and name the same checkpoint."""
    if resume == "disable":
        return None
    if resume == "auto":
        step = resume_step(run_dir)
        return None if step is None else resolve_checkpoint(step_dir(run_dir, step))
    return resolve_checkpoint(resume)


def _tracked_or_newest(run: Path, tracked: int | None, steps: list[int]) -> int | None:
    """The tracker's step when complete, else the newest complete one, or a refusal when the
    tracked step is there but no complete step, or gone with nothing complete left."""
    if tracked is None:
        return steps[-1] if steps else None
    if tracked in steps:
        return tracked
    target = step_dir(run, tracked)
    if _is_file_followed(target / MANIFEST_FILE):  # saved since the steps were listed
        return tracked
    if os.path.lexists(target):
        instead = (
            f"move it away to resume from step {steps[-1]}"
            if steps
            else "move it and the tracker away to start afresh"
        )
        raise DamagedRunDirError(
            f"{run / TRACKER_FILE}: names step {tracked}, but {target}"
            f" {_incomplete_step(target)}; {instead}, or give checkpoint.resume=PATH"
        )
    if steps:  # removed on purpose: the newest left is resumed
        return steps[-1]
    raise DamagedRunDirError(
        f"{run / TRACKER_FILE}: names step {tracked}, but {target} is missing"
        f"{steps_here(run)} and no step is complete; move the tracker away to start afresh,"
        " or give checkpoint.resume=PATH"
    )


def refuse_replacing_steps(run_dir: str | os.PathLike, resumed: int | None) -> None:
    """DamagedRunDirError naming the first entry of `run_dir` that a run resuming step
    `resumed` (None: one starting afresh) would save over or leave behind, unless it is a
    complete step: a `global_step_N` past `resumed` that is a file or an incomplete step
    dir (its save of step N replaces whatever is there, whole), and for a run starting
    afresh any step dir at all (Megatron-LM's `iter_N/` too: its tracker would be
    replaced by this run's). Older steps stay as they are, never saved over, and so do
    links past `resumed` (a save replaces the link, not what it leads to)."""
    run = Path(run_dir)
    if not os.path.isdir(run):
        return
    for name in sorted(_children(run), key=_natural):
        path = run / name
        step = parse_step_dir_name(name)
        if step is not None:
            if resumed is not None and (step <= resumed or os.path.islink(path)):
                continue
            if _is_file_followed(path / MANIFEST_FILE):
                continue
            saving = (
                "a run starting afresh here saves over it"
                if resumed is None
                else f"resuming step {resumed}, this run's save of step {step} replaces it"
            )
            raise DamagedRunDirError(f"{path} {_incomplete_step(path)}, and {saving}: move it away")
        elif resumed is None and _is_megatron_step_name(name) and _is_dir(path):
            raise DamagedRunDirError(
                f"{path} is a Megatron-LM checkpoint, and no mfsdp step is here to resume: a"
                " run starting afresh here writes its steps and tracker beside it; give"
                f" another trainer.run_dir (checkpoint.resume={path} starts from it)"
            )


def _is_megatron_step_name(name: str) -> bool:
    return bool(_ITER_DIR_RE.match(name)) or name == MEGATRON_RELEASE_DIR


def _incomplete_step(path: Path) -> str:
    """What is at a step dir's name that makes it no complete step, in words."""
    if _is_dir(path):
        return (
            f"holds no {MANIFEST_FILE}, which mfsdp writes last (damaged after it was saved,"
            " or another trainer's)"
        )
    return "is a file, not a step dir" if _is_file_followed(path) else "is not a directory"


def _is_file_followed(path: Path) -> bool:
    """`Path.is_file`, except that a step dir this user cannot read counts as incomplete
    instead of raising: an old step left by another user must not stop a resume, and
    reading the one step asked for names it (`_is_dcp`)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def read_tracker(run_dir: str | os.PathLike) -> int | None:
    """The step named by mfsdp's (or verl's) tracker, or None when there is no tracker yet."""
    text = read_tracker_text(run_dir)
    if text is None:
        return None
    if not _STEP_TEXT_RE.fullmatch(text):
        raise DamagedRunDirError(
            f"{Path(run_dir) / TRACKER_FILE}: expected a step number, found {text[:40]!r}"
            f"{steps_here(run_dir)}"
        )
    return int(text)


def read_tracker_text(run_dir: str | os.PathLike) -> str | None:
    """The tracker's stripped text (a step, or Megatron-LM's `release`); None when absent.

    Read through `safe_files`: a FIFO, a directory, 5,000 digits or non-UTF-8 bytes are
    one line naming the file, not a hang or a traceback. Any of them, an empty tracker or
    one that holds no step number is a damaged run dir (DamagedRunDirError)."""
    tracker = Path(run_dir) / TRACKER_FILE
    if not os.path.lexists(tracker):
        return None
    try:
        text = safe_files.read_text(tracker, TRACKER_MAX_BYTES, root=run_dir).strip()
    except CheckpointFileError as err:
        raise DamagedRunDirError(f"{err}{steps_here(run_dir)}") from None
    if not (_STEP_TEXT_RE.fullmatch(text) or text == MEGATRON_RELEASE_DIR):
        raise DamagedRunDirError(
            f"{tracker}: expected a step number, found {text[:40]!r}{steps_here(run_dir)}"
        )
    return text


def read_bridge_tracker(run_dir: str | os.PathLike) -> str | None:
    """The step Megatron-Bridge's `latest_train_state.pt` names, as tracker text; None when
    absent. Read bounded through `safe_files` and `saved_objects.load_scalars` (the
    restricted unpickler: no torch.load); anything but a train state with an integer
    `step` of at least 0 is a damaged run dir."""
    from mfsdp_ckpt.errors import CheckpointFormatError
    from mfsdp_ckpt.format.saved_objects import load_scalars

    tracker = Path(run_dir) / BRIDGE_TRACKER_FILE
    if not os.path.lexists(tracker):
        return None
    try:
        raw = safe_files.read_bytes(tracker, BRIDGE_TRACKER_MAX_BYTES, root=run_dir)
        step = load_scalars(raw, str(tracker)).get("step")
    except (CheckpointFileError, CheckpointFormatError) as err:
        raise DamagedRunDirError(f"{err}{steps_here(run_dir)}") from None
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 10**18:
        raise DamagedRunDirError(
            f"{tracker}: expected an integer step, found {step!r:.40}{steps_here(run_dir)}"
        )
    return str(step)


def steps_here(run_dir: str | os.PathLike) -> str:
    """` (step dirs here: global_step_10, global_step_20)` or ` (no step dirs here)`: what a
    message about a broken tracker adds, so the user sees what could be read instead."""
    run = Path(run_dir)
    try:
        names = sorted(_step_dirs(run, _children(run)), key=_natural)
    except CheckpointPathError:
        return ""
    if not names:
        return " (no step dirs here)"
    return f" (step dirs here: {_newest_of(names)})"


def _newest_of(names: list[str]) -> str:
    """The last MAX_RUNS_LISTED of `names` (steps, oldest first), after `(+N older)` when
    more were left out: `first_of` turned around, since the newest steps are the ones a
    user resumes or names, and older ones are what keep_last removes first."""
    older = len(names) - MAX_RUNS_LISTED
    shown = ", ".join(names[-MAX_RUNS_LISTED:])
    return f"(+{older} older) {shown}" if older > 0 else shown


# --------------------------------------------------------------------------- resolution
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
        return step if step is not None else _iter_step(self.step_dir.name)

    @property
    def root(self) -> Path:
        """The outermost directory of this one checkpoint: reads must stay inside it."""
        if self.step_dir is not None:
            return self.step_dir
        if self.hf_dir is not None:
            return Path(os.path.commonpath([self.dist_ckpt, self.hf_dir]))
        return self.dist_ckpt


def _iter_step(name: str) -> int | None:
    match = _ITER_DIR_RE.match(name)
    return int(match.group(1)) if match else None


def _is_file(path: Path) -> bool:
    """lstat-based: a symlink, FIFO or unreadable entry is not taken as the file it names."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:  # missing, ELOOP, ENAMETOOLONG: not a directory we can use
        return False


def _children(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except PermissionError as err:
        raise _unreadable(directory, "cannot list", err) from None
    except OSError as err:
        raise CheckpointPathError(f"{directory}: cannot list ({err.strerror or err})") from None


def _is_dcp(directory: Path) -> bool:
    """A `.metadata` that is not a directory marks a DCP dir, whatever else it is: a FIFO,
    a link loop or a link to a device there is a damaged checkpoint (exit 1, the reader
    names what `.metadata` is), not a path that holds none (exit 2). A `.metadata/`
    directory belongs to other tools (an Eclipse workspace)."""
    metadata = directory / DCP_METADATA_FILE
    try:
        os.lstat(metadata)
    except PermissionError as err:  # mode 000: a checkpoint we may not read, not "none here"
        raise _unreadable(directory, "cannot open", err) from None
    except OSError:
        return False
    return not _is_dir(metadata)


def _unreadable(path: Path, what: str, err: OSError) -> CheckpointFileError:
    """A directory this user may not read (exit 1, naming it): what it holds is unknown, so
    it is neither "not a checkpoint" nor bad usage."""
    return CheckpointFileError(f"{str(path)[:200]}: {what} ({err.strerror or err})")


def stat_inside(
    path: Path, root: str | os.PathLike, follow_symlinks: bool = True
) -> os.stat_result | None:
    """`os.stat` of a file in the checkpoint `root`, None when nothing is there. Its links
    are resolved inside `root` only (`confined_stat`): one that leads out is a
    LeadsOutError ("resolves outside the checkpoint") and nothing outside is looked
    at, so a checkpoint's findings never tell the size or the existence of a file outside
    it. A directory on the way that this user may not enter (a `huggingface/` of mode 000)
    is a failed read naming that directory (`_unreadable`, exit 1): what it holds is
    unknown, so the file is neither missing nor present, and errno's raw "[Errno 13] ...
    config.json" says neither."""
    try:
        return confined_stat(path, root, follow_symlinks=follow_symlinks)
    except PermissionError as err:
        blocked = next((p for p in path.parents if os.path.lexists(p)), path.parent)
        raise _unreadable(blocked, "cannot open", err) from None


def looks_like_hf_model(names: list[str]) -> bool:
    """Whether a dir holding `names` is a Hugging Face model dir: config.json and weights (not
    the .bin records the HF Trainer keeps beside config.json in its checkpoint-N)."""
    return "config.json" in names and any(
        n.endswith(_HF_WEIGHT_SUFFIXES) and not hf_trainer.STATE_BIN_RE.match(n) for n in names
    )


def resolve_checkpoint(
    path: str | os.PathLike, *, role: str | None = None, _depth: int = 0
) -> CheckpointPaths:
    """Resolve any level of any known layout to one checkpoint's paths.

    Accepts a run dir (follows the tracker), a step dir, verl's `actor/` or `actor/model/`,
    a `dist_ckpt/`, Megatron-LM's `iter_NNNNNNN/` or `release/`, or a directory holding
    exactly one run. `role` picks verl's actor (default) or critic. Raises
    CheckpointPathError with one line (what was looked for, or which choice to make).
    """
    if role is not None and role not in ROLES:
        raise CheckpointPathError(f"--role {role!r}: choose {' or '.join(ROLES)}")
    refuse_url(path)
    given = _with_real_names(Path(path))
    _check_is_dir(given)
    _refuse_unfinished_save(given)
    paths = _resolve_dir(given, role, _depth)
    refuse_pieces_linked_out(given, paths)
    if role is not None and paths.role is None:
        raise CheckpointPathError(
            f"--role {role}: {given} is a {paths.kind} checkpoint, which has no"
            f" {'/ '.join(ROLES)}/ roles"
        )
    return paths


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
    refusal = url_refusal(
        str(path),
        f"only `mfsdp ckpt export-hf` reads checkpoints at URLs ({', '.join(URL_SCHEMES)});"
        " for this, copy it to a local directory first (gcloud storage cp -r, aws s3 cp"
        " --recursive, hdfs dfs -get)",
    )
    if refusal is not None:
        raise CheckpointPathError(refusal)


def _with_real_names(given: Path) -> Path:
    """`given` spelt so that its last parts name the directories themselves: the layout is
    told by names (`global_step_80`, `dist_ckpt`), and `.` (run from inside a step dir) or
    `dist_ckpt/..` named neither, so a step of ours read as a bare dist_ckpt (no step, no
    manifest: "file hashes were not checked"). Collapsed lexically where that names the
    same directory, else through the real path (a symlink before the `..`)."""
    if given.parts and ".." not in given.parts:
        return given  # pathlib drops `.` inside a path: only `.` alone (no parts) and `..` stay
    for candidate in (Path(os.path.normpath(given)), Path(os.path.abspath(given))):
        if candidate.name not in ("", ".", ".."):
            break
    try:
        if os.path.samefile(candidate, given):
            return candidate
        return given.resolve(strict=True)
    except OSError:
        return given  # missing or unreadable: the checks that follow name it as given


def _resolve_dir(given: Path, role: str | None, _depth: int) -> CheckpointPaths:
    """What the directory `given` is, told by the names in it. The tests run from the most
    specific to the most general, since a later one also matches what an earlier one claims:
    another tool's format is refused first (it would otherwise be misread as ours or called
    no checkpoint), then the DCP dir itself, then dirs that hold one (a migrated verl role
    dir holds a dist_ckpt/ too, so it comes before a step's), then role parents, Hugging
    Face Trainer output and model dirs, and last a run, whose steps are looked for one level
    down. A parent of runs is looked for only in the path given (`_depth` 0): a dir that a
    level above chose (a run's step, a role) is a checkpoint or named as none, never
    searched again for runs below it."""
    names = _children(given)
    _refuse_foreign_format(given, names)
    if _is_dcp(given):
        return _from_dcp_dir(given, role)
    if _ITER_DIR_RE.match(given.name):  # Megatron saves its DCP files into iter_N/ itself
        raise _missing_dcp(given)
    if VERL_CONTENTS_FILE in names and DIST_CKPT_DIR in names and VERL_MODEL_DIR in names:
        return _from_migrated_role_dir(given, role)
    if DIST_CKPT_DIR in names and _is_dcp(given / DIST_CKPT_DIR):
        return _from_dcp_dir(given / DIST_CKPT_DIR, role)
    if given.name == DIST_CKPT_DIR or (
        DIST_CKPT_DIR in names and _is_dir(given / DIST_CKPT_DIR) and not _holds_roles(given)
    ):
        dcp = given if given.name == DIST_CKPT_DIR else given / DIST_CKPT_DIR
        if parse_step_dir_name(dcp.parent.name) is not None and _is_ours(dcp.parent):
            return _from_dcp_dir(dcp, role)  # ours: validate names what the manifest lacks
        _refuse_foreign_format(dcp, _children(dcp))
        raise _missing_dcp(dcp)
    if VERL_CONTENTS_FILE in names or (
        VERL_MODEL_DIR in names and _is_dir(given / VERL_MODEL_DIR / DIST_CKPT_DIR)
    ):
        return _from_v2_role_dir(given, role)
    present_roles = [r for r in ROLES if r in names and _is_dir(given / r)]
    if present_roles:
        return _from_role_parent(given, present_roles, role)
    trainer_run = _from_hf_trainer_run(given, names)
    if trainer_run is not None:
        return trainer_run
    if looks_like_hf_model(names):
        raise CheckpointPathError(
            f"{given}: a Hugging Face model dir, not a training checkpoint"
            f" (to make one from it: mfsdp ckpt import-hf {given} --out DIR)"
        )
    models = [n for n in names if hf_trainer.MODEL_DCP_RE.match(n) and _is_dir(given / n)]
    if models:
        return _from_hf_trainer_checkpoint(given, models)
    _refuse_weights_without_config(given, names)
    run = _from_run_dir(given, names, role)
    if run is not None:
        return run
    _refuse_torchtitan_folder(given, names)
    if _depth == 0:
        return _from_parent_of_runs(given, names, role)
    raise _not_a_checkpoint(given)


# Formats of the same tools that mfsdp does not read, by the file that marks them:
# (what it is, what reads it). Megatron-LM tells them apart the same way
# (checkpointing.py: metadata.json -> torch_dist, mp_rank_0* -> torch).
_TORCH_DIST_MARKER = "metadata.json"
_MEGATRON_LEGACY_RE = re.compile(r"^mp_rank_[0-9]{2}")
_VERL_FSDP_RE = re.compile(r"^model_world_size_[0-9]+_rank_[0-9]+\.pt$")


def _refuse_foreign_format(directory: Path, names: list[str]) -> None:
    """ForeignFormatError (one line: what the dir is and what reads it) for a checkpoint
    of a format mfsdp does not read: never 'not a checkpoint', never a misread."""
    if _TORCH_DIST_MARKER in names and _is_file(directory / _TORCH_DIST_MARKER):
        peft = _verl_peft_reader(directory)
        if peft is not None:
            raise ForeignFormatError(
                f"{directory}: a verl LoRA checkpoint: the adapter's shards only, in Megatron"
                f" dist_checkpointing (torch_dist) format, which mfsdp does not read; {peft}"
            )
        raise ForeignFormatError(
            f"{directory}: a Megatron dist_checkpointing (torch_dist) checkpoint"
            f" ({_TORCH_DIST_MARKER}, common.pt), which mfsdp does not read; Megatron-LM and"
            " Megatron-Bridge read it, and verl's `python -m verl.model_merger merge --backend"
            " megatron` converts it to Hugging Face (mfsdp reads --ckpt-format fsdp_dtensor)"
        )
    rank_shards = sorted(n for n in names if hf_trainer.RANK_SHARD_RE.match(n))
    if rank_shards:
        raise ForeignFormatError(
            f"{directory}: Accelerate's per-rank FSDP shards ({rank_shards[0]}: LOCAL_STATE_DICT,"
            " or SHARDED_STATE_DICT saved with use_dcp=False), which mfsdp does not read; load"
            " them with Accelerate and save with SHARDED_STATE_DICT through DCP (its default)"
            " or FULL_STATE_DICT"
        )
    if any(_MEGATRON_LEGACY_RE.match(n) for n in names):
        raise ForeignFormatError(
            f"{directory}: a Megatron-LM legacy checkpoint (mp_rank_NN/model_optim_rng.pt,"
            " --ckpt-format torch), which mfsdp does not read; load it in Megatron-LM and"
            " save it with --ckpt-format fsdp_dtensor"
        )
    shards = sorted(n for n in names if _VERL_FSDP_RE.match(n))
    if shards:
        hf = directory / HF_ASSETS_DIR
        hf_names = _children(hf) if _is_dir(hf) else []
        hint = (
            f"; its {HF_ASSETS_DIR}/ already holds Hugging Face weights"
            if looks_like_hf_model(hf_names)
            else ""
        )
        if _is_file(directory / VERL_FSDP_LORA_DIR / "adapter_config.json"):
            hint += (  # fsdp_workers.py saves a LoRA run's adapter there, PEFT's format
                f"; its {VERL_FSDP_LORA_DIR}/ holds the LoRA adapter in Hugging Face PEFT"
                " format (peft.PeftModel.from_pretrained(base_model, DIR) loads it)"
            )
        raise ForeignFormatError(
            f"{directory}: a verl FSDP checkpoint ({shards[0]}, not Megatron), which mfsdp"
            " does not read; convert it with `python -m verl.model_merger merge --backend fsdp"
            f" --local_dir {directory} --target_dir OUT`{hint}"
        )


def _verl_peft_reader(dcp: Path) -> str | None:
    """What reads verl's LoRA save, when `dcp` is one: verl's v2 manager (mbridge + PEFT)
    puts only the adapter's shards in model/dist_ckpt, writes the adapter in Hugging Face
    PEFT format into model/huggingface/adapter/ and says `backend.peft` in
    ckpt_contents.json. None for any other dir."""
    if dcp.name != DIST_CKPT_DIR or dcp.parent.name != VERL_MODEL_DIR:
        return None
    adapter = dcp.parent / HF_ASSETS_DIR / VERL_PEFT_ADAPTER_DIR
    if _is_file(adapter / "adapter_config.json"):
        return (
            f"verl saved the adapter in Hugging Face PEFT format in {adapter}"
            " (peft.PeftModel.from_pretrained(base_model, DIR) loads it)"
        )
    role_dir = dcp.parent.parent
    if not _is_file(role_dir / VERL_CONTENTS_FILE):
        return None
    contents = read_verl_contents(role_dir)
    backend = contents.get("backend")
    listed = contents.get("contents")
    if (isinstance(backend, dict) and backend.get("peft") is True) or (
        isinstance(listed, dict) and "peft_adapters" in listed
    ):
        return "verl's scripts/megatron_merge_lora.py merges it into the base model"
    return None


def _refuse_torchtitan(given: Path, dcp: Path) -> None:
    """ForeignFormatError for a DCP torchtitan wrote (its model keys at the top level): it
    would read as a checkpoint without model weights. Only a `step-N` dir, torchtitan's
    name for its saves, has its metadata read here."""
    from mfsdp_ckpt.format import torchtitan

    if torchtitan.STEP_DIR_RE.match(dcp.name) and torchtitan.is_torchtitan_dcp(dcp):
        raise ForeignFormatError(torchtitan.message(given, dcp))


def _refuse_torchtitan_folder(given: Path, names: list[str]) -> None:
    """torchtitan's `checkpoint/` folder (step-N dirs), or the dump folder holding it."""
    from mfsdp_ckpt.format import torchtitan

    for folder, entries in ((given, names), (given / "checkpoint", None)):
        if entries is None:
            if "checkpoint" not in names or not _is_dir(folder):
                continue
            entries = _children(folder)
        newest = torchtitan.newest_step_dir(folder, entries)
        if newest is not None:
            _refuse_torchtitan(given, newest)
        newest = torchtitan.newest_step_dir(folder, entries, marker=SAFETENSORS_INDEX)
        if newest is not None:
            _refuse_weights_without_config(newest, _children(newest))


def _refuse_weights_without_config(given: Path, names: list[str]) -> None:
    """Hugging Face safetensors without a config.json: torchtitan's `last_save_in_hf` step
    (`model-0000X-of-0000N.safetensors` + index, no config), or a model dir whose config
    was not copied. It is no training checkpoint, and "not a checkpoint (looked for
    .metadata, ...)" did not say what it is or what makes it usable."""
    from mfsdp_ckpt.format import dcp_hf_shards

    weights = [n for n in names if n.endswith(".safetensors") and _is_file(given / n)]
    shards = dcp_hf_shards.unconsolidated_shards(weights)
    if shards:
        raise CheckpointPathError(dcp_hf_shards.message(given, shards))
    if "config.json" in names or "adapter_config.json" in names or not weights:
        return  # a model dir, or a PEFT adapter (its base's config is elsewhere)
    raise CheckpointPathError(
        f"{given}: Hugging Face safetensors ({len(weights)} file(s), e.g. {weights[0]}) without"
        " a config.json, as torchtitan saves a step with last_save_in_hf; copy the model's"
        " config.json (and tokenizer files) into it to use it as a Hugging Face model dir,"
        f" which `mfsdp ckpt import-hf {given} --out DIR` makes a checkpoint of"
    )


def _holds_roles(directory: Path) -> bool:
    return any(_is_dir(directory / r) for r in ROLES)


def _missing_dcp(dcp: Path) -> MfsdpUsageError | IncompleteCheckpointError:
    """The error for a layout's dist_ckpt/ without `.metadata`: verl saved only Hugging
    Face weights (usage: read those instead), else a save that did not finish (exit 1)."""
    hf = dcp.parent / HF_ASSETS_DIR
    if dcp.name == DIST_CKPT_DIR and _is_dir(hf) and looks_like_hf_model(_children(hf)):
        return CheckpointPathError(
            f"{dcp}: no {DCP_METADATA_FILE} (verl saved no dist_ckpt model state); its weights"
            f" are a Hugging Face dir: {hf}"
        )
    count = len(_children(dcp)) if _is_dir(dcp) else 0
    held = "empty" if count == 0 else f"{count} file(s)"
    return IncompleteCheckpointError(
        f"{dcp}: {held}, no {DCP_METADATA_FILE}: this save did not finish or wrote nothing"
    )


def _check_is_dir(given: Path) -> None:
    try:
        mode = os.stat(given).st_mode
    except FileNotFoundError:
        raise CheckpointPathError(f"{given}: no such file or directory{_meant(given)}") from None
    except PermissionError as err:  # a parent dir this user may not enter
        raise _unreadable(given, "cannot open", err) from None
    except OSError as err:  # ELOOP (symlink loop), ENAMETOOLONG (a 1,500-deep chain)
        reason = "symlink loop" if err.errno == errno.ELOOP else (err.strerror or str(err))
        raise CheckpointPathError(f"{str(given)[:200]}: cannot open ({reason})") from None
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


def _holding_dir(given: Path) -> str:
    """`: PARENT holds it` for a file a checkpoint or run dir holds (`RUN/latest_...txt`,
    `dist_ckpt/.metadata`, a `.distcp`), else nothing: the dir to give instead."""
    if given.name in _CHECKPOINT_FILES or given.suffix == ".distcp":
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


def _refuse_unfinished_save(given: Path) -> None:
    """`global_step_N.tmp/` is a save still running or one that was interrupted: never a
    checkpoint to read, though the files in it may look whole (no manifest says so yet)."""
    for level in (given, given.parent):  # the temp step dir, or its dist_ckpt/
        match = _TMP_STEP_RE.match(level.name)
        if match:
            raise CheckpointPathError(
                f"{given}: an unfinished save of step {match.group(1)} (renamed to "
                f"{STEP_DIR_PREFIX}{match.group(1)}/ only once complete); give the run dir "
                f"{level.parent}"
            )


def _not_a_checkpoint(given: Path) -> CheckpointPathError:
    unsaved = _run_without_steps(given)
    if unsaved is not None:
        return CheckpointPathError(
            f"{given}: is a training run with no checkpoint saved yet{unsaved}"
        )
    return CheckpointPathError(
        f"{given}: not a checkpoint (looked for {DCP_METADATA_FILE}, {DIST_CKPT_DIR}/, "
        f"{'/ '.join(ROLES)}/, {VERL_MODEL_DIR}/{DIST_CKPT_DIR}/, {TRACKER_FILE}, "
        f"{STEP_DIR_PREFIX}N/, {MEGATRON_ITER_PREFIX}NNNNNNN/, {hf_trainer.MODEL_DCP_PREFIX}0/,"
        f" checkpoint-N/){_inside_a_checkpoint(given)}"
    )


def _run_without_steps(given: Path) -> str | None:
    """For a training run's dir that holds no step yet, `""` or ` (pid N is training it
    now)` when a live process holds its lock; None for anything else. A run is known by
    its config.yaml or metrics.jsonl (written as it starts), or, empty still, by its lock
    held (`mfsdp data` holds one on a dir it fills with sft/ and rl/ at once). The lock
    file, beside the dir, is not opened: the kernel's list of locks says who holds it."""
    marked = _is_file(given / RUN_CONFIG_FILE) or _is_file(given / RUN_METRICS_FILE)
    pid = lock_holder(given)
    if not marked and (pid is None or _children(given)):
        return None
    if pid is None:
        return ""
    return f" (pid {pid} is training it now)" if pid else " (a process is training it now)"


def _inside_a_checkpoint(given: Path) -> str:
    """`; it lies in the checkpoint STEP: give that` for a directory inside a checkpoint that
    holds no weights (its `huggingface/`: config and tokenizer; verl's `actor/huggingface/`),
    where the list of what was looked for alone left the user to work out the level."""
    parent = given.parent
    for _ in range(2):  # huggingface/ in a step, or in verl's role dir of a step
        if parent == parent.parent:
            break
        if _is_dir(parent / DIST_CKPT_DIR) or _is_file(parent / DCP_METADATA_FILE):
            return f"; it lies in the checkpoint {parent}: give that"
        parent = parent.parent
    return ""


def _from_dcp_dir(dcp: Path, role: str | None) -> CheckpointPaths:
    """Name the layout of a DCP dir from the directories around it."""
    _refuse_foreign_format(dcp, _children(dcp))
    _refuse_torchtitan(dcp, dcp)
    parent = dcp.parent
    if hf_trainer.MODEL_DCP_RE.match(dcp.name):
        return _hf_trainer_paths(dcp)
    model = hf_trainer.model_dir_of_optimizer(dcp)
    if model is not None and _is_dcp(model):
        note = f"{dcp} holds the optimizer state only: reading the checkpoint {model}"
        return _noted(_hf_trainer_paths(model), note)
    if _ITER_DIR_RE.match(dcp.name) or (dcp.name == MEGATRON_RELEASE_DIR):
        kind = _megatron_kind(dcp)
        hf_dir = _bridge_hf_export(dcp) if kind == MEGATRON_BRIDGE else None
        return CheckpointPaths(dcp, dcp, parent, kind, hf_dir=hf_dir)
    if dcp.name != DIST_CKPT_DIR:
        return CheckpointPaths(dist_ckpt=dcp)
    hf_dir = parent / HF_ASSETS_DIR if _is_dir(parent / HF_ASSETS_DIR) else None
    if parse_step_dir_name(parent.name) is not None:  # ours or verl SFT: no role level
        kind = MFSDP if _is_ours(parent) else VERL_SFT
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
    (another tool's manifest.json there, or a damaged one, leaves it a bare dist_ckpt)."""
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
    reader, not taken for no config), and the step trainer_state.json records."""
    checkpoint = dcp.parent
    in_run = hf_trainer.checkpoint_number(checkpoint.name) is not None
    step, note = hf_trainer.recorded_step(checkpoint)
    if in_run and not os.path.lexists(checkpoint / hf_trainer.TRAINER_STATE_FILE):
        note = (
            f"{checkpoint} holds no {hf_trainer.TRAINER_STATE_FILE}, which the Trainer writes"
            " last: this save may not have finished, and resume_from_checkpoint cannot resume it"
        )
    optimizer = hf_trainer.optimizer_dir(dcp)
    names = _children(checkpoint)
    return CheckpointPaths(
        dcp,
        checkpoint,
        checkpoint.parent if in_run else None,
        HF_TRAINER,
        hf_dir=checkpoint if os.path.lexists(checkpoint / "config.json") else None,
        note=note,
        optimizer_dcp=optimizer if os.path.lexists(optimizer) else None,
        recorded_step=step,
        hf_skip=tuple(n for n in names if n in hf_trainer.TRAINER_FILES or _is_dir(checkpoint / n)),
    )


def _from_hf_trainer_checkpoint(checkpoint: Path, models: list[str]) -> CheckpointPaths:
    """A dir holding Accelerate's `pytorch_model_fsdp_K/` (the Trainer's checkpoint-N): the
    one model's DCP; with several (a run that prepared several models) the user picks."""
    if len(models) > 1:
        shown = first_of([f"{m}/" for m in sorted(models, key=_natural)], MAX_RUNS_LISTED)
        raise CheckpointPathError(
            f"{checkpoint}: holds {shown} (one per model Accelerate prepared); give the one to read"
        )
    dcp = checkpoint / models[0]
    if not _is_dcp(dcp):
        raise _missing_dcp(dcp)
    return _from_dcp_dir(dcp, None)


def _from_hf_trainer_run(run: Path, names: list[str]) -> CheckpointPaths | None:
    """The HF Trainer's output dir: its newest checkpoint-N, the one
    `resume_from_checkpoint=True` resumes (transformers' get_last_checkpoint: the largest
    N). None when `run` holds no checkpoint-N dir, or is a run of another layout (a
    tracker, step dirs). A Hugging Face model beside the checkpoints (a final save_model)
    is named in a note."""
    checkpoints: dict[str, int] = {}
    for name in names:
        number = hf_trainer.checkpoint_number(name)
        if number is not None and _is_dir(run / name):
            checkpoints[name] = number
    trackers = (TRACKER_FILE, BRIDGE_TRACKER_FILE)
    if not checkpoints or any(t in names for t in trackers) or _step_dirs(run, names):
        return None
    newest = max(checkpoints.values())
    tied = sorted(n for n, number in checkpoints.items() if number == newest)
    if len(tied) > 1:
        raise CheckpointPathError(f"{run}: {' and '.join(tied)} are both step {newest}; give one")
    target = run / tied[0]
    others = sorted((n for n in checkpoints if n != tied[0]), key=_natural)
    context = f"{tied[0]} is the newest checkpoint of {run}, the one resume_from_checkpoint=True"
    context += " resumes" + (
        f"; other checkpoint dirs here: {_newest_of(others)}" if others else ""
    )
    if not _children(target):
        raise IncompleteCheckpointError(f"{target}: empty, a save that did not finish ({context})")
    try:
        paths = resolve_checkpoint(target, _depth=1)
    except (CheckpointPathError, IncompleteCheckpointError) as err:
        raise type(err)(f"{err} ({context})") from None
    also_model = (
        f"{run} holds a Hugging Face model too (config.json and weights, a final save);"
        f" reading its newest training checkpoint, {tied[0]}"
    )
    return _noted(paths, also_model if looks_like_hf_model(names) else None, run_dir=run)


def _megatron_kind(iter_dir: Path) -> str:
    """Megatron-Bridge writes train_state.pt and run_config.yaml into every iteration dir
    (and latest_train_state.pt beside them); Megatron-LM writes none of them."""
    bridge_files = (BRIDGE_TRAIN_STATE_FILE, BRIDGE_RUN_CONFIG_FILE)
    if any(_is_file(iter_dir / name) for name in bridge_files) or _is_file(
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
    return hf if _is_dir(hf) and _is_file(hf / "config.json") else None


def _is_ours(step: Path) -> bool:
    """A step mfsdp wrote: it has a manifest, or a sibling step of its run has one (then a
    missing manifest is damage to report, not a sign of verl, whose steps never have one).
    Any entry named manifest.json counts: a FIFO or a link there is a damaged mfsdp step,
    which validate then refuses, not a verl step to read without one."""
    return os.path.lexists(step / MANIFEST_FILE) or bool(list_complete_steps(step.parent))


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


def _from_v2_role_dir(role_dir: Path, role: str | None) -> CheckpointPaths:
    """verl v2's `actor/` (or an SFT step dir, which has no role level): with Megatron-FSDP
    every state is in model/dist_ckpt (the optimizer/ and extra/ dirs exist but are empty,
    though ckpt_contents.json lists them)."""
    if VERL_CONTENTS_FILE in _children(role_dir):
        read_verl_contents(role_dir)  # a hostile or broken file is refused here, in one line
    dcp = role_dir / VERL_MODEL_DIR / DIST_CKPT_DIR
    if not _is_dcp(dcp):
        if _is_dir(dcp):
            _refuse_foreign_format(dcp, _children(dcp))
        raise _missing_dcp(dcp)
    return _from_dcp_dir(dcp, role)


def _from_migrated_role_dir(role_dir: Path, role: str | None) -> CheckpointPaths:
    """A verl role dir (or SFT step) holding both layouts: verl's
    scripts/migrate_megatron_checkpoint_layout.py links the v2 split beside the pre-v2
    dist_ckpt/ and leaves that in place, and a v2 run that saves the step again rewrites
    only model/. verl then loads model/dist_ckpt (ckpt_contents.json marks the step v2, and
    it refuses the pre-v2 layout), so that is what is read; the note names what is not."""
    paths = _from_v2_role_dir(role_dir, role)
    left = (
        f"{role_dir / DIST_CKPT_DIR} (verl's pre-v2 layout) is left unread:"
        f" {VERL_CONTENTS_FILE} marks {role_dir} as v2, which verl loads from"
        f" {paths.dist_ckpt}"
    )
    return _noted(paths, left)


def read_verl_contents(role_dir: Path) -> dict:
    """verl's ckpt_contents.json (schema 2), bounded and read only as JSON data."""
    file = role_dir / VERL_CONTENTS_FILE
    try:
        text = safe_files.read_text(file, CONTENTS_MAX_BYTES, root=role_dir)
    except CheckpointFileError as err:
        raise CheckpointPathError(str(err)) from None
    return loads_object(text, str(file), CheckpointPathError)


def _from_role_parent(step: Path, present: list[str], role: str | None) -> CheckpointPaths:
    """A verl RL step dir: actor/ and maybe critic/; the actor unless `role` says otherwise."""
    chosen = role or (DEFAULT_ROLE if DEFAULT_ROLE in present else None)
    if chosen is None:
        raise CheckpointPathError(
            f"{step}: holds {', '.join(present)}/ only; pass --role {present[0]}"
        )
    if chosen not in present:
        raise CheckpointPathError(
            f"{step}: no {chosen}/ here (it holds {', '.join(p + '/' for p in present)})"
        )
    paths = resolve_checkpoint(step / chosen, role=chosen, _depth=1)
    return _with(paths, roles=tuple(present))


def _with(paths: CheckpointPaths, **changes) -> CheckpointPaths:
    """`paths` as a level above adds what it knows (the run dir, the roles beside it), its
    note kept as the level below wrote it (`_noted` adds one)."""
    return replace(paths, **changes)


def _noted(paths: CheckpointPaths, *notes: str | None, **changes) -> CheckpointPaths:
    """`paths` with `notes` added after the note it already carries: each level of a path
    read (a run, its tracked step, a migrated role dir) may have something to say, and a
    level above replacing the note below lost it."""
    joined = "; ".join(n for n in (paths.note, *notes) if n)
    return replace(paths, note=joined or None, **changes)


def _step_dirs(run: Path, names: list[str]) -> dict[str, Path]:
    """Step dirs of any layout in a run dir: {name: path}."""
    return {
        n: run / n
        for n in names
        if (parse_step_dir_name(n) is not None or _is_megatron_step_name(n)) and _is_dir(run / n)
    }


def _from_run_dir(run: Path, names: list[str], role: str | None) -> CheckpointPaths | None:
    """A run dir of any layout, or None when `run` is not one."""
    steps = _step_dirs(run, names)
    tracker = BRIDGE_TRACKER_FILE if BRIDGE_TRACKER_FILE in names else TRACKER_FILE
    if tracker == BRIDGE_TRACKER_FILE:  # Megatron-Bridge resumes from it before the .txt
        tracked = read_bridge_tracker(run)
    else:
        tracked = read_tracker_text(run) if TRACKER_FILE in names else None
    if not steps:
        if tracked is not None:
            raise DamagedRunDirError(
                f"{run / tracker}: names {tracked!r}, but there is no step dir here"
            )
        unfinished = sorted(int(m.group(1)) for m in map(_TMP_STEP_RE.match, names) if m)
        if unfinished:
            raise DamagedRunDirError(
                f"{run}: a save of step {unfinished[-1]} did not finish"
                f" ({STEP_DIR_PREFIX}{unfinished[-1]}"
                f"{TMP_STEP_SUFFIX}/ only); no complete checkpoint here"
            )
        return None
    ours = [n for n, p in steps.items() if _is_file(p / MANIFEST_FILE)]
    if ours:
        return _from_our_run_dir(run, tracked)
    if tracked is not None:
        target = _tracked_step_dir(run, tracked, steps, tracker)
        try:
            paths = resolve_checkpoint(target, role=role, _depth=1)
        except IncompleteCheckpointError as err:
            others = _newest_of(sorted((n for n in steps if steps[n] != target), key=_natural))
            raise IncompleteCheckpointError(
                f"{run / tracker} names {tracked!r}, but {err}"
                + (f" (other step dirs here: {others})" if others else "")
            ) from None
        return _noted(paths, _newer_than_tracked(run, tracked, steps, tracker), run_dir=run)
    if len(steps) > 1:
        shown = _newest_of(sorted(steps, key=_natural))
        raise CheckpointPathError(
            f"{run}: {len(steps)} step dirs and no {TRACKER_FILE}; give one of them ({shown})"
        )
    (only,) = steps.values()
    return _with(resolve_checkpoint(only, role=role, _depth=1), run_dir=run)


def _newer_than_tracked(
    run: Path, tracked: str, steps: dict[str, Path], tracker: str = TRACKER_FILE
) -> str | None:
    """A step dir newer than the tracker's step: verl's async save never updates the
    tracker, so its newest step is often not the one named. Both verl and Megatron-LM
    resume from the tracker, and so does mfsdp; the note says what else is there."""
    if tracked == MEGATRON_RELEASE_DIR:
        return None
    numbered = {n: parse_step_dir_name(n) or _iter_step(n) for n in steps}
    newer = sorted((s, n) for n, s in numbered.items() if s is not None and s > int(tracked))
    if not newer:
        return None
    step, name = newer[-1]
    unfinished = _unfinished_save(steps[name])
    if unfinished is not None:
        return (
            f"{run / tracker} names step {int(tracked)}, but {name}/ (step {step}) is newer and"
            f" holds no {unfinished}: a save that did not finish; reading step {int(tracked)}"
        )
    return (
        f"{run / tracker} names step {int(tracked)}, but {name}/ (step {step}) is newer"
        f" (an async save does not update the tracker); reading step {int(tracked)}: give"
        f" {run / name} to read the newer one"
    )


def _unfinished_save(step: Path) -> str | None:
    """What a step dir lacks that its save writes last, in words, or None when it has it:
    verl v2's manager writes ckpt_contents.json after every piece (model/ under a role dir,
    or under the step for SFT), and DCP writes `.metadata` last, into Megatron's iter_N/
    itself or verl's dist_ckpt/ (under the step, a role, or a role's model/)."""
    holders = [step, *(step / role for role in ROLES)]
    if any(
        _is_dir(holder / VERL_MODEL_DIR) and not os.path.lexists(holder / VERL_CONTENTS_FILE)
        for holder in holders
    ):
        return f"{VERL_CONTENTS_FILE}, which verl writes last"
    dcps = [d for h in holders for d in (h, h / DIST_CKPT_DIR, h / VERL_MODEL_DIR / DIST_CKPT_DIR)]
    if not any(os.path.lexists(d / DCP_METADATA_FILE) for d in dcps):
        return f"{DCP_METADATA_FILE}, which a save writes last"
    return None


def _natural(name: str) -> list:
    """Sort key ordering names by their numbers as numbers: a string sort puts
    `global_step_10` before `global_step_9`, so a list cut to its last (newest) entries
    would drop the newest step."""
    return [int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", name)]


def _tracked_step_dir(
    run: Path, tracked: str, steps: dict[str, Path], tracker: str = TRACKER_FILE
) -> Path:
    if tracked == MEGATRON_RELEASE_DIR:
        candidates = [MEGATRON_RELEASE_DIR]
    elif tracker == BRIDGE_TRACKER_FILE:  # Megatron-Bridge writes iter_N/ only
        candidates = [f"{MEGATRON_ITER_PREFIX}{int(tracked):07d}"]
    else:
        candidates = [
            f"{STEP_DIR_PREFIX}{int(tracked)}",
            f"{MEGATRON_ITER_PREFIX}{int(tracked):07d}",
        ]
    for name in candidates:
        if name in steps:
            return steps[name]
    not_dirs = [name for name in candidates if os.path.lexists(run / name)]
    what = (
        f"{not_dirs[0]} is not a directory"
        if not_dirs
        else (f"{' / '.join(c + '/' for c in candidates)} is missing")
    )
    raise DamagedRunDirError(
        f"{run / tracker}: names step {tracked!r}, but {what}{steps_here(run)}"
    )


def _from_our_run_dir(run: Path, tracked: str | None) -> CheckpointPaths:
    """mfsdp's run dir: the tracker's step, which must be complete (manifest written)."""
    if tracked is not None:
        if tracked == MEGATRON_RELEASE_DIR:
            raise DamagedRunDirError(
                f"{run / TRACKER_FILE}: expected a step number, found 'release'{steps_here(run)}"
            )
        target = step_dir(run, int(tracked))
        if not _is_file(target / MANIFEST_FILE):
            raise DamagedRunDirError(
                f"{run / TRACKER_FILE}: names step {int(tracked)}, but {target} is missing"
                f" or incomplete{steps_here(run)}"
            )
    else:
        target = step_dir(run, list_complete_steps(run)[-1])
    return CheckpointPaths(
        target / DIST_CKPT_DIR, target, run, MFSDP, hf_dir=target / HF_ASSETS_DIR
    )


def runs_held(directory: str | os.PathLike, names: list[str] | None = None) -> list[Path]:
    """The runs of any layout that `directory` holds as its sub-dirs (a tracker, step dirs,
    or the HF Trainer's checkpoint-N in them): `mfsdp demo --out runs/demo` writes the run
    runs/demo/sft. Hidden dirs and dirs this user cannot list are left out."""
    given = Path(directory)
    runs = []
    for name in _children(given) if names is None else names:
        child = given / name
        if not _is_dir(child) or name.startswith("."):
            continue
        try:
            child_names = os.listdir(child)
        except OSError:
            continue
        trackers = (TRACKER_FILE, BRIDGE_TRACKER_FILE)
        if (
            any(t in child_names for t in trackers)
            or _step_dirs(child, child_names)
            or any(
                hf_trainer.checkpoint_number(n) is not None and _is_dir(child / n)
                for n in child_names
            )
        ):
            runs.append(child)
    return runs


def _from_parent_of_runs(given: Path, names: list[str], role: str | None) -> CheckpointPaths:
    """A directory holding runs (`runs_held`): exactly one resolves to it, with a note;
    several are listed."""
    runs = runs_held(given, names)
    if not runs:
        raise _not_a_checkpoint(given)
    if len(runs) > 1:
        shown = first_of(runs, MAX_RUNS_LISTED)
        raise CheckpointPathError(f"{given}: holds {len(runs)} runs; give one of them ({shown})")
    paths = resolve_checkpoint(runs[0], role=role, _depth=1)
    return _noted(paths, f"{given} holds one run: reading {runs[0]}")


# --------------------------------------------------------------------------- outputs
def checkpoint_containing(path: str | os.PathLike, *, run_itself: bool = True) -> Path | None:
    """The checkpoint that `path` is or lies inside (a step, role or DCP dir, or, for `path`
    itself unless `run_itself` is False, a run or a dir holding a dist_ckpt); None if none.

    Writing an export there would add unlisted files to a checkpoint, or, with --overwrite,
    replace one (`--out RUN/global_step_40`): callers refuse such output paths. A new dir
    beside the steps of a run (`RUN/hf`) is fine. `path` need not exist; what exists of it
    and its ancestors decides. A training run's run_dir is a run by design (`run_itself`
    False), but never a step of one.
    """
    current = Path(os.path.abspath(path))
    for candidate in (current, *current.parents):
        if _is_checkpoint_dir(candidate, is_target=run_itself and candidate == current):
            return candidate
    return None


def unsaved_step_words(path: str | os.PathLike, inside: Path) -> str | None:
    """How `path` relates to `inside`, what `checkpoint_containing` found, when that is no
    checkpoint on disk but the name of a step of a run not saved (yet): `RUN/global_step_999`
    is refused because the run's saves write there, and "lies inside the checkpoint
    RUN/global_step_999" named a checkpoint that is not there. None when `inside` exists:
    the caller says it is, or lies in, a checkpoint."""
    if os.path.lexists(inside):
        return None
    where = "is" if Path(os.path.abspath(path)) == inside else f"lies in {inside}, which is"
    return (
        f"{where} the name of a checkpoint step of the run {inside.parent} (its saves write"
        " there; none is saved there now)"
    )


def _is_checkpoint_dir(candidate: Path, is_target: bool) -> bool:
    name = candidate.name
    step_like = bool(
        parse_step_dir_name(name) is not None
        or _TMP_STEP_RE.match(name)
        or _is_megatron_step_name(name)
    )
    trackers = (TRACKER_FILE, BRIDGE_TRACKER_FILE)
    if step_like and any(_is_file(candidate.parent / tracker) for tracker in trackers):
        return True  # a step of a run, saved or still to come
    if not _is_dir(candidate):
        return False
    markers = (DCP_METADATA_FILE, MANIFEST_FILE, VERL_CONTENTS_FILE, hf_trainer.TRAINER_STATE_FILE)
    if any(_is_file(candidate / marker) for marker in markers):
        return True
    if step_like and any(_is_dir(candidate / part) for part in (DIST_CKPT_DIR, *ROLES)):
        return True
    return is_target and (
        any(_is_file(candidate / tracker) for tracker in trackers)
        or _is_dir(candidate / DIST_CKPT_DIR)
    )
