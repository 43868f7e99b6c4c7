"""The config keys that name a local file or directory, checked before torch loads: those
read from, and the run directory written to.

Each of them was otherwise read only once training had started (seconds into the run, once
per rank), and `model.hf_config` not at all when nothing needed it: a typo'd or Hub-style
value (`Qwen/Qwen2.5-0.5B`) then failed late with a message about a missing file inside it,
or was ignored. Nothing is ever downloaded, so a path that is not on this machine is a usage
mistake, named by its key. A relative path is read from the current directory, which is not
where the config file lives: the message says which directory that was. A run directory
that cannot be written failed at its first write, after the model was built, and with
several ranks as rank 0's error followed by the other ranks' tracebacks from the collective
rank 0 left.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mfsdp_ckpt.convert.hf_config import weights_file_problem
from mfsdp_ckpt.format import finding_runs, layout, path_urls, run_steps
from mfsdp_ckpt.format.closest_path import where_relative
from mfsdp_ckpt.format.foreign_run_dirs import foreign_run_words
from mfsdp_ckpt.format.hub_id import hub_id_hint
from mfsdp_ckpt.storage.writable import require_writable_dir
from trainer import shell_unexpanded
from trainer.config import ConfigError, path_values
from trainer.metrics import TENSORBOARD_DIR

# What model.hf_config must name (model_source checks it too, where it would go unread)
HF_CONFIG_NEEDED = "a local Hugging Face model dir or config.json"
# (section, key, what it must name): the model path itself is checked by model_source,
# data files by cli.launch.check_data_files (each with its own hint).
PATH_KEYS = (
    ("model", "tokenizer", "a local tokenizer dir"),
    ("model", "hf_config", HF_CONFIG_NEEDED),
    ("model", "lora_adapter_path", "a local PEFT adapter dir"),
    ("reward", "path", "a local python file"),
)


def missing_path(key: str, value: str, needed: str) -> ConfigError:
    """The one-line error for a path key whose value is not on this machine."""
    hub = hub_id_hint(value, f"{key}=")
    if hub:
        return ConfigError(
            f"{key}: {value} does not exist ({needed} is needed{where_relative(value)}){hub}"
        )
    return ConfigError(
        f"{key}: {value} does not exist ({needed} is needed; nothing is downloaded"
        f"{where_relative(value)})"
    )


# Every form a shell expands, none of which a config file does (`trainer.shell_unexpanded`):
# `${...}` (verl's OmegaConf `${oc.env:HOME}` and `${data.path}` too), `$NAME`, the positional
# and special parameters (a converted config trained into a folder named `$2`), a command's
# output and arithmetic (`$(( ))` and `$[ ]`)
UNEXPANDED = shell_unexpanded.UNEXPANDED


def _what(found: re.Match) -> str:
    """What the shell (or OmegaConf) would have put in place of `found`, an `UNEXPANDED` match."""
    kind = shell_unexpanded.form(found)
    if kind == "command":
        return "a command substitution"
    if kind == "arithmetic":
        return "an arithmetic expansion"
    name = found.group(0).strip("${}")  # `$2` and `${10}`: 2 and 10; `$$`: nothing
    if name == "0":
        return "the name of the script it came from"
    if name.isdigit() or name in ("@", "*", "#"):
        return "an argument of the script it came from"
    if name in ("", "?", "!", "-"):
        return "a shell special parameter"
    return "a variable or interpolation"


def check_no_variables(cfg: Any) -> None:
    """No path key holds what would be read as another local name than the one meant: a
    shell expansion (`_refuse_unexpanded`) or a URL (`_refuse_url`). Both were made a
    relative path in the current directory, and the run trained into it."""
    for key, value in path_values(cfg):
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                _refuse_unexpanded(key, item)
                _refuse_url(key, item)


def _refuse_unexpanded(key: str, item: str) -> None:
    """The shell expands `$HOME` (or a script's `$2`) on the command line, but a config
    file's `run_dir: $HOME/runs/x` (or verl's `${oc.env:HOME}`) reached the trainer as
    written, and the run created a directory named `$HOME` (or `$2`) in the current one."""
    found = UNEXPANDED.search(item)
    if found:
        raise ConfigError(
            f"{key}: {item} holds {found.group(0)}, which nothing expands here"
            f" ({_what(found)}: a config has no shell expansion or ${{...}}"
            " interpolation); write the path out (in an unquoted override the shell"
            " expands it)"
        )


# What a URL other than a `file:` one of this machine is told in a path key: verl copies
# an hdfs:// model to the machine itself, mfsdp reads and writes local paths only
READ_LOCALLY = "mfsdp trains from and into local paths: copy it locally first"
WRITE_LOCALLY = "mfsdp trains from and into local paths: write locally, then copy"


def _refuse_url(key: str, item: str) -> None:
    """`trainer.run_dir=gs://bucket/run1` trained into `./gs:/bucket/run1` with exit 0,
    reporting checkpoints at `gs:/bucket/run1/global_step_N`: a user who took them for
    saved to the bucket lost them with the machine. A URL in any path key is refused
    before launch; a `file:` URL names the local path to give."""
    remote = WRITE_LOCALLY if key == "trainer.run_dir" else READ_LOCALLY
    refusal = path_urls.url_refusal(item, remote)
    if refusal is not None:
        raise ConfigError(f"{key}: {refusal}")


def check_local_paths(cfg: Any) -> None:
    """Every path key of `cfg` (an SFT or GRPO config) that is set names something that
    exists; directories where a directory is needed."""
    for section, key, needed in PATH_KEYS:
        value = getattr(getattr(cfg, section, None), key, None)
        if value is None:
            continue
        if not os.path.exists(value):
            raise missing_path(f"{section}.{key}", value, needed)
        if needed.endswith(" dir") and not os.path.isdir(value):
            raise ConfigError(f"{section}.{key}: {value} is a file; {needed} is needed")
        if (section, key) == ("model", "hf_config") and weights_file_problem(value):
            raise ConfigError(f"model.hf_config: {weights_file_problem(value)}")


def check_run_dir_apart(cfg: Any, hf_dir: str | os.PathLike | None) -> None:
    """`trainer.run_dir` may not be, or lie inside, a model dir the run reads (`hf_dir`:
    model.path when it is a Hugging Face dir; model.hf_config; model.tokenizer): its
    checkpoints, metrics and config.yaml would be written among the user's download (in a
    Hugging Face cache, the snapshot every other run reads), as export-hf and import-hf
    refuse an --out there."""
    run = Path(os.path.abspath(cfg.trainer.run_dir)).resolve()
    model = cfg.model
    for key, value in (
        ("model.path", hf_dir),
        ("model.hf_config", model.hf_config),
        ("model.tokenizer", model.tokenizer),
    ):
        if value is None:
            continue
        read = Path(value).resolve()
        read = read.parent if read.is_file() else read
        if run == read or read in run.parents:
            raise ConfigError(
                f"trainer.run_dir: {cfg.trainer.run_dir} is or lies inside {key} {value}, a"
                " model dir this run reads; choose a run_dir outside it"
            )


def check_run_dir_is_its_own(run_dir: str) -> None:
    """`trainer.run_dir` names a directory of the run's own: an empty one (`run_dir: ""`)
    trained into the current directory, its checkpoints, metrics.jsonl and config.yaml among
    the user's files, and so did `.`, `..` or the current directory's path
    (`_holds_the_current_directory`), unless it is a run already or holds nothing else
    (`_holds_others`); the file system's root
    (`/`, `/tmp/..`, a link to `/`) was a traceback from the run-dir lock, which lives beside
    the run dir (nothing is beside `/`), with exit 1 and under --json nothing on stdout."""
    if not run_dir.strip():
        raise ConfigError(
            f"trainer.run_dir: {run_dir!r} is empty; give the directory the run writes its"
            " checkpoints and metrics to (e.g. trainer.run_dir=runs/NAME)"
        )
    real = os.path.realpath(run_dir)
    named = run_dir if run_dir == real else f"{run_dir} ({real})"
    if os.path.dirname(real) == real:
        raise ConfigError(
            f"trainer.run_dir: {named} is the file system's root; give a directory of the"
            " run's own (e.g. trainer.run_dir=runs/NAME)"
        )
    if _holds_the_current_directory(real) and not _is_a_run(real) and _holds_others(real):
        raise ConfigError(
            f"trainer.run_dir: {named} is the current directory or above it; name a new one"
            " (e.g. trainer.run_dir=runs/NAME)"
        )


def _holds_the_current_directory(real: str) -> bool:
    """Whether the resolved run dir `real` is the current directory or one above it: `.`,
    `..` or the absolute path of either trained among the user's files (its checkpoints,
    metrics.jsonl and config.yaml in a project's source tree), as `run_dir: ""` did. The
    rule and its words are those of every command's --out
    (`mfsdp_ckpt.storage.out_dir.checked_target`)."""
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:  # the current directory was removed: no files of the user's there
        return False
    return real == here or Path(real) in Path(here).parents


# What a run writes in its run dir: a directory holding nothing else is the run's own,
# however it is named (`mkdir exp && cd exp` and `trainer.run_dir=.`, as a batch job runs)
RUN_FILES = {layout.RUN_CONFIG_FILE, layout.RUN_METRICS_FILE, layout.TRACKER_FILE, TENSORBOARD_DIR}


def _holds_others(real: str) -> bool:
    """Whether the directory `real` holds anything a run does not write there (`RUN_FILES`,
    its step dirs): a project's files, or the directory the command runs in (`..`). An empty
    one, or one where an earlier run stopped before its first save, is the run's own; a
    config.yaml there that mfsdp did not write is refused on its own
    (`config_history.own_config_note`)."""
    try:
        names = os.listdir(real)
    except OSError:
        return False  # not there yet (made by the run) or unreadable: said where it is used
    return any(
        name not in RUN_FILES and not name.startswith(layout.STEP_DIR_PREFIX) for name in names
    )


def _is_a_run(real: str) -> bool:
    """Whether `real` is a run dir of mfsdp's already (its tracker, or a complete step): `cd
    RUN` and `trainer.run_dir=.` resumes it, as before."""
    return os.path.isfile(os.path.join(real, layout.TRACKER_FILE)) or bool(
        run_steps.list_complete_steps(real)
    )


# Directories torch makes when it is imported, named by the environment: one it cannot
# make stopped the run as a bare "[Errno 2] No such file or directory: '/proc/x'" from
# inside `import transformers` (torch._dynamo makes its cache dir at import), model.compile
# or not.
TORCH_ENV_DIRS = ("TORCHINDUCTOR_CACHE_DIR",)


def check_torch_env_dirs(environ: Mapping[str, str] = os.environ) -> None:
    """Make each directory of TORCH_ENV_DIRS the environment names, as torch will on import;
    one that cannot be made is a usage mistake naming the variable."""
    for name in TORCH_ENV_DIRS:
        value = environ.get(name)
        if not value:
            continue
        try:
            os.makedirs(value, exist_ok=True)
        except OSError as err:
            raise ConfigError(
                f"environment variable {name}={value}: torch cannot create it"
                f" ({err.strerror or err}); unset it or name a writable directory"
            ) from None


def check_run_dir_is_no_model_dir(run_dir: str) -> None:
    """`trainer.run_dir` may not be a Hugging Face model dir (config.json and weights): a run
    trained into an export (`runs/demo/hf`) put its steps and tracker among the model's files,
    and the dir then read three ways: validate found the steps, inspect and export-hf the
    model, and `model.path` loaded the model's weights, not the checkpoints."""
    try:
        names = os.listdir(run_dir)
    except OSError:  # missing (made by the run) or unlistable (check_writable_dir says so)
        return
    if layout.looks_like_hf_model(names):
        raise ConfigError(
            f"trainer.run_dir: {run_dir} is a Hugging Face model dir (config.json and weights);"
            " give a directory of the run's own (e.g. trainer.run_dir=runs/NAME)"
        )


# The folders `mfsdp data` writes its tables into (cli/data.py), as .parquet
DATA_TABLE_DIRS = ("sft", "rl")
DATA_TABLE_SUFFIX = ".parquet"


def check_run_dir_holds_no_other_output(run_dir: str) -> None:
    """`trainer.run_dir` may not be a directory that holds runs or an `mfsdp data` output:
    `mfsdp demo --out demo` writes the run demo/sft beside its tables demo/data, and a run
    trained into `demo` put its steps beside demo/sft, after which `mfsdp ckpt validate demo`
    read the new steps, not "the one run demo holds"; into demo/data, among the parquet
    tables (`mfsdp data` refuses a run dir as --out likewise). Which sub-dirs are runs is
    what the readers decide (`finding_runs.runs_held`); an empty dir, or one holding anything
    else, is the run's own."""
    try:
        names = os.listdir(run_dir)
    except OSError:  # missing (made by the run) or unlistable (check_writable_dir says so)
        return
    runs = [str(Path(run_dir) / run.name) for run in finding_runs.runs_held(run_dir, names)]
    if runs:
        shown = ", ".join(runs[: layout.MAX_RUNS_LISTED])
        held, which = ("the run", "that") if len(runs) == 1 else ("the runs", "one of them")
        foreign = foreign_run_words(Path(runs[0])) if len(runs) == 1 else None
        hint = (
            f"{runs[0]} {foreign}"  # resuming it is refused in turn
            if foreign is not None
            else f"give {which} to resume it, or a new dir (e.g. trainer.run_dir=runs/NAME)"
        )
        raise ConfigError(f"trainer.run_dir: {run_dir} holds {held} {shown}; {hint}")
    tables = [n for n in DATA_TABLE_DIRS if n in names and _holds_tables(Path(run_dir) / n)]
    if tables:
        raise ConfigError(
            f"trainer.run_dir: {run_dir} is an mfsdp data output"
            f" ({', '.join(t + '/' for t in tables)} tables); give a directory of the run's own"
            " (e.g. trainer.run_dir=runs/NAME)"
        )
    real = Path(os.path.realpath(run_dir))
    if real.name in DATA_TABLE_DIRS and _holds_tables(real):
        raise ConfigError(
            f"trainer.run_dir: {run_dir} holds the tables of the mfsdp data output"
            f" {Path(run_dir).parent}; give a directory of the run's own"
            " (e.g. trainer.run_dir=runs/NAME)"
        )


def _holds_tables(folder: Path) -> bool:
    """`folder` is a directory holding a table as `mfsdp data` writes them."""
    try:
        return any(n.endswith(DATA_TABLE_SUFFIX) for n in os.listdir(folder))
    except OSError:  # not a directory, or unlistable: no tables of ours
        return False


def check_run_dir_steps(run_dir: str, resume: str) -> None:
    """What the run dir holds fits `checkpoint.resume`, before anything starts.

    `auto`: the step to resume is decided here, as the run will decide it
    (`run_steps.resume_step`): a run dir it refuses (a damaged tracked step, a file at a step's
    name, a step dir a save would replace) was found only once the model was built, or
    never, where the run dir was taken for one with nothing to resume and the damaged step
    was trained over from step 0 and overwritten.

    `disable` starts afresh: into a run dir holding an earlier run's checkpoints it saved
    its steps beside them (global_step_2 beside the old 4 and 6), replaced config.yaml
    without keeping the old one, and a later `resume=auto` resumed from the newest step,
    whichever run it came from, then overwrote the old run's steps. Refused, naming the
    steps (or what else is at a step's name); the user moves them away or chooses another
    run_dir.

    Any other value is a checkpoint's path, resolved here as the run will resolve it: a
    typo (`disabled`), a missing path or a model dir is refused naming the key
    (`resume_key.check_resume_path`); its step, into a run dir holding its own later steps
    or something a save after it replaces, as the run refuses it
    (`resume.refuse_saving_over_named_step`), which it did only once the model was built."""
    if resume == "auto":
        run_steps.resume_step(run_dir)
        return
    if resume != "disable":
        from trainer.resume import refuse_saving_over_named_step
        from trainer.resume_key import check_resume_path

        found = check_resume_path(run_dir, resume)
        if found is not None:
            refuse_saving_over_named_step(Path(run_dir), found, resume)
        return
    if run_steps.list_complete_steps(run_dir):
        raise ConfigError(
            f"trainer.run_dir: {run_dir} holds an earlier run's checkpoints"
            f"{run_steps.steps_here(run_dir)} and checkpoint.resume=disable starts afresh, which"
            " would mix this run's steps with them; give another trainer.run_dir, or"
            " checkpoint.resume=auto to continue that run"
        )
    run_steps.refuse_replacing_steps(run_dir, None)


def check_run_dir_outside_checkpoints(run_dir: str) -> None:
    """`trainer.run_dir` may not be, or lie inside, a checkpoint: `RUN/global_step_2`, typed
    for the run that holds it, made a new run inside that step (its own steps and tracker
    among the step's files) that started from nothing. The run holding it is named: it is
    the run_dir that resumes."""
    inside = finding_runs.checkpoint_containing(run_dir, run_itself=False)
    if inside is None:
        return
    shown = finding_runs.named_as_given(inside, run_dir)  # relative where run_dir was
    what = (
        "is a checkpoint"
        if inside == Path(os.path.abspath(run_dir))
        else f"lies in the checkpoint {shown}"
    )
    what = finding_runs.unsaved_step_words(run_dir, inside) or what
    trackers = (layout.TRACKER_FILE, layout.BRIDGE_TRACKER_FILE)
    found = next((p for p in inside.parents if any((p / t).is_file() for t in trackers)), None)
    run = finding_runs.named_as_given(found, run_dir) if found is not None else None
    foreign = foreign_run_words(run) if run is not None else None
    if foreign is not None:  # resuming it is refused in turn: say what does start from it
        hint = f"{run} {foreign}"
    elif run is not None:
        hint = f"give trainer.run_dir={run} to resume the run it belongs to"
    else:
        hint = f"choose a run_dir outside it (checkpoint.resume={shown} starts from it)"
    raise ConfigError(f"trainer.run_dir: {run_dir} {what}; {hint}")


def check_writable_dir(key: str, value: str) -> None:
    """`value` is a directory this process can create files in, or one it can create."""
    require_writable_dir(key, value, error=ConfigError)
