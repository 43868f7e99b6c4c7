"""What every `mfsdp train` command does around its runner: check the config, start ranks,
report the result.

The config is checked before torch is imported, so a mistake costs a fraction of a second,
and the CPU thread count is chosen then too (`trainer.threads`: OpenMP reads it when torch
loads). `mfsdp train sft|grpo --nproc-per-node N [--nnodes M ...]` then runs the same
subcommand again under torchrun (cli/torchrun.py); each rank finds RANK set and trains instead
of launching again. One module, so every training command starts and reports the same way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from cli import stop_signals
from cli.demo_record import DEMO_DIR
from cli.errors import (
    EXIT_USAGE,
    GivenPath,
    Terminated,
    fail,
    json_option,
    on_interrupt,
)
from cli.launch_flags import check_launch, help_pointer
from cli.main import settle
from cli.missing_path import missing_line, refuse_missing
from cli.result_said import expect_result, result_said
from cli.run_report import FinalValue, interrupted_run, report_run
from cli.stop import EXIT_INTERRUPTED
from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from trainer.env_ints import env_int, joins_a_group, process_rank
from trainer.threads import CPU_RANKS_RULE

# Set by the launching process, so its ranks do not repeat the config notes it showed.
CONFIG_CHECKED = "MFSDP_CONFIG_CHECKED"
INTERRUPT_GRACE_SECONDS = 60  # for the ranks to stop after Ctrl-C before they are killed
ORPHANS_GRACE_SECONDS = 10  # for ranks to die with their killed torchrun before being killed


@dataclass(frozen=True)
class Launch:
    """Where the ranks of a run come from: torchrun's own flags, passed through."""

    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str = "mfsdp"

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1 or self.rdzv_endpoint is not None

    @property
    def several_machines(self) -> bool:
        """A run across machines, resumed only once every machine's command starts again; a
        one-machine run given `--rdzv-endpoint` (multi_node's flags) is resumed as any."""
        return self.nnodes > 1


# `--json` of every train command: the result, or a failure, as one JSON object on stdout
TRAIN_JSON = json_option(
    "Print the result as one JSON object on stdout (a failure as {error, exit_code})."
)


def config_option(sections: str, trainer: str) -> Callable[[Callable], Callable]:
    """`--config FILE.yaml` of a train command (`sections`: the config's sections, named in
    its help). Given twice it is refused: click kept the last silently, so `--config A
    --config B` trained with B alone, which its user had meant to combine with A."""
    return click.option(
        "--config",
        "config_path",
        type=GivenPath(dir_okay=False),
        multiple=True,
        callback=_one_config,
        help=f"The run's settings: a YAML file (sections {sections}), which the"
        " key=value OVERRIDES change. Needed unless the overrides set data.train_files; start"
        f" one with `mfsdp config defaults {trainer} > {trainer}.yaml` (every key at its"
        " default) or from examples/.",
    )


def _one_config(_ctx: click.Context, _param: click.Parameter, given: tuple[str, ...]) -> str | None:
    """The one `--config` given (None: none), or click's usage error when given twice."""
    if len(given) > 1:
        raise click.BadParameter(
            f"given {len(given)} times ({', '.join(given)}); one file is read: give one, and"
            " change its keys with key=value overrides"
        )
    return given[0] if given else None


def launch_options(command: Callable) -> Callable:
    """The torchrun flags every train command takes (same names as torchrun's)."""
    options = [
        click.option(
            "--nproc-per-node",
            type=int,
            default=1,
            show_default=True,
            help="Processes on this machine (one per GPU), started through torchrun; on CPU"
            f" at most {CPU_RANKS_RULE}; no more in all than one global batch's rows.",
        ),
        click.option(
            "--nnodes",
            type=int,
            default=1,
            show_default=True,
            help="Machines in the run; start the same command on each (docs/multinode.md).",
        ),
        click.option(
            "--node-rank",
            type=click.IntRange(0),
            default=None,
            help="This machine's index, 0..nnodes-1 (torchrun assigns one when left out).",
        ),
        click.option(
            "--rdzv-endpoint",
            default=None,
            metavar="HOST:PORT",
            help="Rendezvous address all machines reach (torchrun's c10d backend);"
            " an IPv6 address as [ADDRESS]:PORT.",
        ),
        click.option(
            "--rdzv-id",
            default="mfsdp",
            show_default=True,
            help="Job id shared by the machines of one run (letters, digits, . _ - : @ +).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def load_checked_config(cls: type, config_path: str | None, overrides: list[str]) -> Any:
    """Load and check the config without importing torch; a mistake exits 2 in one line."""
    import logging

    from cli.verbosity import configure_logging
    from trainer.config import NotAnOverride, load_config

    configure_logging()  # a rank torchrun started takes `-v` from the environment
    if os.environ.get(CONFIG_CHECKED):  # the launching process showed the notes already
        logging.getLogger("mfsdp.config").setLevel(logging.ERROR)
    from trainer.config_kind import refuse_other_kind
    from trainer.grpo.config import GRPOConfig, note_validation_unread
    from trainer.grpo.dump_dirs import check_dump_dirs
    from trainer.local_paths import (
        check_local_paths,
        check_no_variables,
        check_run_dir_apart,
        check_run_dir_holds_no_other_output,
        check_run_dir_is_its_own,
        check_run_dir_is_no_model_dir,
        check_run_dir_outside_checkpoints,
        check_run_dir_steps,
        check_torch_env_dirs,
        check_writable_dir,
    )
    from trainer.lora_adapter_config import check_adapter_config
    from trainer.lora_gone_adapter import resume_without_adapter_dir
    from trainer.metrics import require_trackers
    from trainer.model_code import check_model_files
    from trainer.model_source import note_unread_shape, resolve_model_source
    from trainer.run_config_elsewhere import refuse_config_of_another_run_dir
    from trainer.run_dir_links import check_run_dir_entries

    refuse_other_kind(cls, config_path)  # the other trainer's config, a verl launch script
    try:
        cfg: Any = load_config(cls, config_path, overrides)  # SFTConfig or GRPOConfig
    except NotAnOverride as err:  # a command-line mistake, said as one
        fail(f"{err}{help_pointer()}", EXIT_USAGE)
    # a moved or copied run's config.yaml, whose recorded run_dir is another
    refuse_config_of_another_run_dir(cls, config_path, overrides, cfg.trainer.run_dir)
    check_no_variables(cfg)
    check_batch_sizes(cfg, 1)  # the part of any world size; `start` checks the ranks launched
    refuse_flash_attention_on_cpu(cfg)
    if isinstance(cfg, GRPOConfig):
        note_validation_unread(cfg)  # val_before_train / eval_every without data.val_files
    check_torch_env_dirs()
    require_trackers(cfg.trainer)
    source = resolve_model_source(cfg.model)  # a missing model.path fails here, not per rank
    note_unread_shape(cfg.model)
    resume_without_adapter_dir(cfg)  # a gone adapter dir: the resumed step's own adapter
    check_local_paths(cfg)  # and so does every other path key
    check_model_files(cfg.model, source)  # model files that would run code or unpickle
    check_adapter_config(cfg.model)  # adapter_config.json, as each rank reads it
    check_run_dir_is_its_own(cfg.trainer.run_dir)
    check_run_dir_outside_checkpoints(cfg.trainer.run_dir)
    check_writable_dir("trainer.run_dir", cfg.trainer.run_dir)
    check_run_dir_entries(cfg.trainer.run_dir)  # no link, FIFO or dir where the run writes
    hf_dir = source.assets if source is not None and source.checkpoint is None else None
    check_run_dir_apart(cfg, hf_dir)  # a model dir this run reads, named by its key
    check_run_dir_is_no_model_dir(cfg.trainer.run_dir)  # any other
    check_run_dir_holds_no_other_output(cfg.trainer.run_dir)
    check_run_dir_steps(cfg.trainer.run_dir, cfg.checkpoint.resume)
    check_dump_dirs(cfg.trainer)  # GRPO's generation dumps: none in an SFT config
    return cfg


def check_batch_sizes(cfg: Any, world_size: int) -> None:
    """GRPO's batch sizes, which must divide over the `world_size` ranks
    (`check_grpo_batches`), checked before torch loads, so that a mistake costs no launch
    (each rank checks them again with the world size it joined). SFT's batch is any number
    of rows over any number of ranks, which `check_local_ranks` caps."""
    from trainer.grpo.batch_sizes import check_grpo_batches
    from trainer.grpo.config import GRPOConfig

    if isinstance(cfg, GRPOConfig):
        check_grpo_batches(cfg, world_size)


def data_hint(kind: str) -> str:
    """How to make a data file of the table family `kind` (`sft` or `rl`) `mfsdp data`
    writes, its commands named as this user types them (`./dev mfsdp ...` under `./dev`)."""
    convert = mfsdp_command("data gsm8k|math --input OFFICIAL_FILE --out DIR")
    return (
        f"make it with {convert} (writes DIR/{kind}/<split>.parquet)"
        f" or {mfsdp_command('data synthetic --out DIR')}"
    )


DATA_SUFFIXES = (".parquet", ".jsonl", ".json")  # what trainer.data.files reads


def _demo_data_hint(path: str, hint: str) -> str:
    """How to make the missing data file `path`: the demo writes what lies under its default
    directory (the examples' configs read their data there: examples/sft_tiny_cpu.yaml's
    `runs/demo/data/sft/train.parquet`), `mfsdp data` anything else (`hint`)."""
    if Path(os.path.normpath(path)).parts[:2] == Path(DEMO_DIR).parts:
        return f"{mfsdp_command('demo')} writes it (the examples read the demo's data), or {hint}"
    return hint


def check_data_files(data: Any, kind: str, config_given: bool = True) -> None:
    """A missing data file, a directory, or a file of a format the trainers do not read is
    reported before anything starts (and before torch loads), with how to make one; `kind` is
    `sft` or `rl`, the table family `mfsdp data` writes. No training files and no --config
    (`config_given`) is said as that (`no_config_file`)."""
    from trainer.config import no_config_file

    hint = data_hint(kind)
    if not data.train_files and not config_given:
        fail(no_config_file("grpo" if kind == "rl" else "sft"), EXIT_USAGE)
    if not data.train_files:
        fail(
            "data.train_files: no training files given; set it (in the --config FILE.yaml,"
            f" or data.train_files=FILE) or {hint}",
            EXIT_USAGE,
        )
    for key in ("train_files", "val_files"):
        for path in getattr(data, key):
            if os.path.isdir(path):
                fail(
                    f"data.{key}: {path}: is a directory, not a data file"
                    f" ({_directory_hint(path, key, kind)})",
                    EXIT_USAGE,
                )
            if _nothing_named(path):
                what = _list_hint(key, path) or _demo_data_hint(path, hint)
                fail(f"data.{key}: {missing_line(path)}; {what}", EXIT_USAGE)
            try:  # a FIFO or a device: reading it would block or never end
                safe_files.regular_file(path)
            except CheckpointFileError as err:
                fail(f"data.{key}: {err}{_link_named(path)}", EXIT_USAGE)
            if not path.lower().endswith(DATA_SUFFIXES):
                fail(f"data.{key}: {path}: not a .parquet or .jsonl file; {hint}", EXIT_USAGE)


def _nothing_named(path: str) -> bool:
    """Whether no file of any kind is named `path`, so that making one is the remedy. A
    symlink leading nowhere (a loop, a link to a missing target) is listed by `ls`: it was
    said to be "no such file", with how to make one; it is left to `safe_files`, which says
    what it is in the words `mfsdp data` uses for the same file."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:  # ELOOP on the way, a name too long: something safe_files names
        pass
    return False


def _link_named(path: str) -> str:
    """Where `path` points when it is a symlink, for the line refusing it: a link to a
    missing target is otherwise "file is missing", of a file `ls` lists."""
    if not os.path.islink(path):
        return ""
    return f"; it is a symlink to {os.readlink(path)}"


LISTED_WHOLE = 8  # files a hint's list gives in full; a longer one shows its first few


def _directory_hint(path: str, key: str, kind: str) -> str:
    """The data files a directory given as one holds (`mfsdp data` writes `sft/` and `rl/`
    tables: the user gave `DIR/sft` or `DIR`), else where such tables would be. A
    directory of shards (`part-0.parquet`, ..., or the Hub's `train-00000-of-00003`) is
    answered with the list that reads them all: naming one of them trained on a fraction
    of the data, and nothing said so. Thousands of shards are counted, and the list shown
    with its first few: each must be listed (no glob is read)."""
    from trainer.data.files import data_files_in

    found = sorted(str(p) for p in data_files_in(Path(path), levels=2))
    if not found:
        return f"e.g. {path}/{kind}/<split>.parquet, as mfsdp data writes them"
    of_kind = [name for name in found if f"/{kind}/" in f"/{name}"] or found
    split, files = _split_files(of_kind, key)
    if len(files) == 1:
        return f"it holds {first_of(of_kind, 4)}: e.g. data.{key}={files[0]}"
    which = f"all {len(files)} {split} files" if len(files) < len(of_kind) else "all of them"
    if len(files) <= LISTED_WHOLE:
        return f"it holds {first_of(of_kind, 4)}; to read {which}: data.{key}=[{','.join(files)}]"
    return (
        f"it holds {len(of_kind)} data files; to read {which}, list every one:"
        f" data.{key}=[{','.join(files[:3])},...] (or under {key}: in the --config YAML)"
    )


def _split_files(files: list[str], key: str) -> tuple[str, list[str]]:
    """The split of `files` that `data.{key}` reads and its files, by name (`train.parquet`,
    `train-00000-of-00003.parquet`): validation files are `val*`, else `test*`; files of no
    such name are all one split, named ""."""
    for split in ("train",) if key == "train_files" else ("val", "test"):
        named = [name for name in files if Path(name).stem.startswith(split)]
        if named:
            return split, named
    return "", files


def _list_hint(key: str, path: str) -> str | None:
    """For `data.train_files=a.parquet,b.parquet` (Hydra's sweep syntax, a plain string
    here) whose parts are files: how to write the list."""
    parts = [part.strip() for part in path.split(",")]
    if len(parts) < 2 or not all(os.path.isfile(part) for part in parts):
        return None
    return f"for several files write a list: data.{key}=[{','.join(parts)}]"


def start(
    subcommand: str,
    cfg: Any,
    launch: Launch,
    config_path: str | None,
    as_json: bool,
    overrides: list[str],
    logged_before: int = 0,
) -> None:
    """Check the data files (the launch flags were, by `check_launch`) and, when launching,
    that this machine can run the ranks (`check_local_ranks`), choose CPU threads, then
    return when this process should train; when it should launch ranks instead, run
    torchrun and exit as they ended (`end_as_ranks_ended`: a failed rank fails the command,
    a signal that stopped them ends it with the interrupted line)."""
    from cli.first_rows import check_first_rows
    from trainer.local_ranks import check_local_ranks
    from trainer.node_rank import pass_node_rank
    from trainer.prerequisites import check_prerequisites
    from trainer.threads import configure_threads

    # Not in a rank torchrun started (it sets TORCHELASTIC_RUN_ID beside RANK): RANK and
    # WORLD_SIZE a job system set per machine (Kubeflow, AzureML) or an export left over made
    # the launch flags train in this one process instead, waiting for ranks nobody started;
    # torchrun, given the same flags, launches and sets each rank's own. TORCHELASTIC_RUN_ID
    # alone (exported from a torchelastic job's shell) made `--nproc-per-node 2` one process.
    in_torchrun_rank = bool(os.environ.get("TORCHELASTIC_RUN_ID")) and "RANK" in os.environ
    launching = not in_torchrun_rank and (launch.nproc_per_node > 1 or launch.multi_node)
    kind = "rl" if subcommand == "grpo" else "sft"
    check_data_files(cfg.data, kind, config_given=config_path is not None)
    check_first_rows(cfg, kind)  # before torch: train refuses such a row after loading it
    check_prerequisites(cfg)  # after every path: a missing model or data is the first to fix
    if launching:  # before torchrun starts a process per rank, each loading torch
        check_local_ranks(subcommand, cfg, launch.nproc_per_node, launch.nnodes)
        check_batch_sizes(cfg, launch.nproc_per_node * launch.nnodes)
    local_ranks = launch.nproc_per_node if launching else env_int("LOCAL_WORLD_SIZE", 1, minimum=1)
    configure_threads(local_ranks)
    _quiet_known_warnings()
    if launching:
        os.environ[CONFIG_CHECKED] = "1"
        pass_node_rank(launch.node_rank)  # torchrun's c10d numbers machines as they join
        _ranks_import_this_code()
        here = " on this machine" if launch.multi_node else ""
        say_starting(subcommand, f"launching {launch.nproc_per_node} processes{here} (torchrun)")
        code = run_ranks(torchrun_command(subcommand, launch, config_path, as_json, overrides))
        several = launch.several_machines
        end_as_ranks_ended(
            code, lambda stopped: interrupted_run(cfg, logged_before, stopped, several)
        )
        sys.exit(0)
    _quiet_library_bars(cfg)
    if process_rank() == 0:
        say_starting(subcommand, "loading torch and transformers")


def _ranks_import_this_code() -> None:
    """The ranks run `python -m cli.train`, which puts the working directory first on their
    sys.path: a user's own `trainer/` or `cli/` package there (common names in a training
    project) was imported instead of mfsdp's, and the run failed with its traceback. The
    ranks import mfsdp from where this process found it, and nothing from the working
    directory (PYTHONSAFEPATH, Python 3.11+)."""
    root = str(Path(__file__).resolve().parents[1])
    os.environ["PYTHONSAFEPATH"] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))


def _quiet_library_bars(cfg: Any) -> None:
    """transformers draws a "Loading weights" bar in every process that loads a model: N bars
    at once under --nproc-per-node N, and into a log file or a pipe lines of carriage
    returns. Only the main rank draws it, and only where the run's own bar is drawn (a
    terminal, `trainer.progress_bar`), in each rank. The variable is read once, as
    huggingface_hub and transformers load; a config check may have loaded them already (a
    model dir's generation_config.json is read through transformers), so their switches
    are turned off too."""
    from trainer.progress import draws_bars

    if process_rank() == 0 and draws_bars(cfg.trainer.progress_bar):
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers.utils.logging" in sys.modules:
        from transformers.utils import logging

        logging.disable_progress_bar()


def say_starting(subcommand: str, what: str) -> None:
    """One line on stderr as a slow phase of starting a run begins: torchrun, then loading torch
    and transformers and building the model, take seconds before the run's first line (many on
    a few cores), and a run that prints nothing meanwhile looks hung."""
    print(f"[{subcommand}] {what} ...", file=sys.stderr, flush=True)


class RanksEnded(int):
    """torchrun's exit code, and `stopped_by`: what stopped the ranks when a signal the run
    did not send did (`rank 1: killed by SIGKILL ...`, `rank 0: interrupted`), as torchrun
    told it (cli/torchrun.py `STOPPED_BY`); None otherwise."""

    stopped_by: str | None

    def __new__(cls, code: int, stopped_by: str | None = None) -> RanksEnded:
        ended = super().__new__(cls, code)
        ended.stopped_by = stopped_by
        return ended


def run_ranks(command: list[str], ends_command: bool = True, **popen: Any) -> RanksEnded:
    """Run torchrun and return its exit code, with what stopped the ranks when a signal did
    that the run did not send (`RanksEnded`); when torchrun was killed, once no process of
    the run lives (ranks its `kill -9` orphaned trained on, saving into a run dir whose lock
    was gone, after this process had named an older checkpoint as the newest).

    Ctrl-C or SIGTERM (or SIGHUP, SIGQUIT, SIGUSR1: `cli.stop_signals`) is passed on to
    torchrun, which passes it on to the ranks: a `kill -INT` of this process alone (a
    supervisor, `timeout -s INT`) reached nothing else, and the ranks trained on. Wait while
    they stop (a rank mid-save leaves only its temporary directory), then say so once (the ranks
    stay quiet, `report_errors`), unless they had finished the run; a second Ctrl-C stops
    waiting. With `ends_command` (`mfsdp train`: the ranks' result is the command's) the run is
    finished once rank 0 printed the result (it marks the file named here, `cli.result_said`):
    from then on the code is 0, whatever signal came or however torchrun ended, and a signal
    that came as torchrun exited, before the outcome was settled here, is spent (it ended the
    command with 143 after the result); otherwise (the demo, which goes on) a signal stops the
    command still. torchrun, and through it every rank, gets SIGTERM should this process die
    first (`kill -9` of it); this thread waits on it, so the signal, which follows the thread
    that started the child, comes at no other time."""
    from cli.torchrun import LAUNCH_ID, STOPPED_BY, await_run_processes, dies_with_parent

    dies = dies_with_parent()
    if dies is not None:
        given = popen.get("preexec_fn")
        popen["preexec_fn"] = dies if given is None else lambda: (given(), dies())
    launch_id = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="mfsdp_launch_") as folder:
        told = os.path.join(folder, "stopped_by")
        env = {**(popen.get("env") or os.environ), LAUNCH_ID: launch_id, STOPPED_BY: told}
        expect_result(folder, env)
        popen["env"] = env
        popen.setdefault("stdin", subprocess.DEVNULL)  # no rank may wait on input (`no_input`)
        child = subprocess.Popen(command, **popen)
        try:
            code = _settled(child.wait(), env, ends_command)
        except KeyboardInterrupt as err:  # during the wait, or as it returned (torchrun ended)
            stopped = isinstance(err, Terminated)
            code = _stop(child, stop_signals.stopped_by() if stopped else signal.SIGINT)
            if not ends_command or _settled(code, env, ends_command) != 0:
                raise
            code = 0
        finally:
            if child.returncode is not None and child.returncode < 0:  # killed: its ranks were
                await_run_processes(launch_id, ORPHANS_GRACE_SECONDS)  # not stopped nor waited for
        stopped_by = _told(told)
    return RanksEnded(code, stopped_by)


def _settled(code: int, env: dict[str, str], ends_command: bool) -> int:
    """The command's code for torchrun's exit `code`: 0 once rank 0 printed the result (with
    `ends_command`), when the outcome is settled (`settle`), else `code`."""
    if ends_command and (code == 0 or result_said(env)):
        settle(0)  # the run ended as its ranks said
        return 0
    return code


def _told(path: str) -> str | None:
    """What torchrun left in the file at `path` (`STOPPED_BY`), None when it left nothing."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read() or None
    except OSError:
        return None


def _stop(child: subprocess.Popen, sig: int) -> int:
    """Send torchrun `sig` (the terminal's Ctrl-C reached it already: it acts on the first),
    and return its exit code once it has stopped its ranks; killed after
    INTERRUPT_GRACE_SECONDS or a second Ctrl-C (its ranks die with it)."""
    child.send_signal(sig)
    try:
        return child.wait(timeout=INTERRUPT_GRACE_SECONDS)
    except (KeyboardInterrupt, subprocess.TimeoutExpired):
        child.kill()
        return child.wait()


def _node_0_torch_misses(launch: Launch) -> bool:
    """Whether `launch` is node 0 of several given an endpoint at an address of this machine
    that torch does not take for it (`cli.own_address`): it must be told to host the store.
    Where torch does take it, torch decides, so a node 1 of the same run started first on
    this machine (how a run across machines is tried out on one) keeps the store it hosts."""
    from cli.own_address import names_this_machine, torch_sees_as_this_machine

    if launch.node_rank != 0 or launch.rdzv_endpoint is None:
        return False
    host = launch.rdzv_endpoint.rsplit(":", 1)[0].strip("[]")
    return names_this_machine(host) and not torch_sees_as_this_machine(host)


def torchrun_command(
    subcommand: str, launch: Launch, config_path: str | None, as_json: bool, overrides: list[str]
) -> list[str]:
    """`python -m cli.torchrun ... -m cli.train SUBCOMMAND [--config F] [--json] OVERRIDES`
    (torchrun's own flags; cli/torchrun.py reports a failed rank in mfsdp's way)."""
    command = [
        sys.executable,
        "-m",
        "cli.torchrun",
        f"--nproc-per-node={launch.nproc_per_node}",
    ]
    if launch.multi_node:
        command += [
            f"--nnodes={launch.nnodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={launch.rdzv_endpoint}",
            f"--rdzv-id={launch.rdzv_id}",
        ]
        if launch.node_rank is not None:
            command.append(f"--node-rank={launch.node_rank}")
        if launch.nnodes == 1 or _node_0_torch_misses(launch):  # torch guesses from the
            command.append("--rdzv-conf=is_host=true")  # host name: a second NIC's address
    else:
        command.append("--standalone")
    command += ["-m", "cli.train", subcommand]
    if config_path:
        command += ["--config", config_path]
    if as_json:
        command.append("--json")
    return command + list(overrides)


def _quiet_known_warnings() -> None:
    """megatron_fsdp warns on import that Transformer Engine and Apex are missing (always so
    on CPU; it then uses its own kernels): the warning broke the progress bar mid-line."""
    import warnings

    warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")


def refuse_flash_attention_on_cpu(cfg: Any) -> None:
    """ConfigError for a FlashAttention version with `trainer.device=cpu`: decided by the
    config alone, so `mfsdp config check` refuses it as train does, before torch loads (with
    `trainer.device=auto` the machine decides: `trainer.model.check_attention_backend`)."""
    from trainer.attention_names import flash_attention_refusal
    from trainer.config import ConfigError

    if cfg.trainer.device == "cpu":
        refusal = flash_attention_refusal(cfg.model.attn_implementation, "cpu")
        if refusal is not None:
            raise ConfigError(refusal)


def run_command(
    subcommand: str,
    config_cls: type,
    config_path: str | None,
    overrides: tuple[str, ...],
    launch: dict[str, Any],
    as_json: bool,
    train: Callable[[Any], tuple[Any, list[FinalValue]]],
) -> None:
    """The body of every train command, so they start and report alike: check the config
    (before torch loads), launch ranks or be one, then `train(cfg)` returns the runner's result
    and the values to report, which `report_run` prints."""
    from cli.torchrun import die_with_torchrun
    from trainer.metrics import metrics_size

    die_with_torchrun()  # in a rank of `--nproc-per-node N`, first of all
    flags = Launch(**launch)
    check_launch(flags)
    if config_path is not None:
        refuse_missing(config_path)
    cfg = load_checked_config(config_cls, config_path, list(overrides))
    logged_before = metrics_size(cfg.trainer.run_dir)
    on_interrupt(lambda: interrupted_run(cfg, logged_before))
    with one_run_at_a_time(cfg.trainer.run_dir, flags):
        start(subcommand, cfg, flags, config_path, as_json, list(overrides), logged_before)
        with no_input():
            result, finals = train(cfg)
    report_run(subcommand, result, as_json, finals)


@contextlib.contextmanager
def no_input() -> Iterator[None]:
    """`sys.stdin` reads nothing (/dev/null) for the block: a tracker asks for an account on
    a terminal (wandb's prompt, when it finds no key), and a rank waiting on input held
    the others at their next collective, on a prompt shared by every rank's terminal.
    Ranks under torchrun get /dev/null as their stdin (`run_ranks`); a lone process, whose
    stdin is the user's terminal, trains with this."""
    with open(os.devnull, encoding="utf-8") as nothing:
        given, sys.stdin = sys.stdin, nothing
        try:
            yield
        finally:
            sys.stdin = given


@contextlib.contextmanager
def one_run_at_a_time(run_dir: str, launch: Launch) -> Iterator[None]:
    """Hold the run dir's lock (`export-hf`'s and `mfsdp data`'s, beside it) for the run: a
    second run started into the same run dir while one trains (a job launched twice, a
    requeue before the first stopped) saved into the first one's step dirs, failed at its
    first save on a file the other had renamed, and interleaved its lines into
    metrics.jsonl. Taken by the process the user started, which outlives its ranks; not
    across machines (`--nnodes` > 1), where every machine's launcher starts the same run.

    The run dir's missing parents are made here, as `mkdir -p` would (its lock goes beside
    it); when the run fails, they and the run dir, if this command made them and they are
    still empty, are removed again, innermost first, as every command's `--out` is: a run
    that stopped on a bad data file left `s1/s2/` of `trainer.run_dir=s1/s2/run` behind."""
    from mfsdp_ckpt.storage.out_dir import make_parents, remove_empty
    from mfsdp_ckpt.storage.out_lock import out_lock

    if joins_a_group() or launch.multi_node:
        yield
        return
    run = Path(os.path.abspath(run_dir))
    new = [*make_parents(run), *([] if os.path.lexists(run) else [run])]
    try:
        with out_lock(run_dir, "trainer.run_dir"):
            yield
    except BaseException as err:
        if not (isinstance(err, SystemExit) and err.code in (0, None)):
            remove_empty([folder for folder in new if os.path.isdir(folder)])
        raise


def end_as_ranks_ended(code: int, stopped_line: Callable[[str], str]) -> None:
    """Return when torchrun's exit `code` is 0; else end this command as the ranks ended (for
    `mfsdp train` and `mfsdp demo` alike). torchrun killed by a signal (`kill -9` of it, the
    out-of-memory killer; it exited 128+N, without a word), a rank a signal stopped that the
    run did not send (the out-of-memory killer's SIGKILL, a `kill -INT` of one rank: torchrun
    tells which, `RanksEnded.stopped_by`) and ranks stopped by a signal this process did not
    get (the ranks leave an interrupt to the launching process to say) end with
    `stopped_line(what stopped them)`, which names the checkpoint kept: the ranks have all
    stopped (`run_ranks` waited for them), so the newest one is the one resumed; exit 130
    for an interrupt (128 + N and `SIGTERM:` or the like before the line when torchrun got a
    stop signal this process did not: `cli.stop_signals`), else 1. Any other code is a rank's
    failure, which that rank said: exit with it as it is."""
    if code == 0:
        return
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        fail(stopped_line(f"torchrun, the ranks' launcher, was killed by {name}"))
    stopped_by = getattr(code, "stopped_by", None)
    if stopped_by is not None:
        fail(stopped_line(stopped_by), int(code))  # 130 for an interrupt, else 1
    if code == EXIT_INTERRUPTED:
        fail(stopped_line("interrupted"), EXIT_INTERRUPTED)
    number = stop_signals.by_exit_code(code)  # torchrun alone got it (cli/torchrun.py
    if number is not None:  # `_signal_code`)
        fail(stop_signals.said(stopped_line("interrupted"), number), stop_signals.exit_code(number))
    sys.exit(code)
