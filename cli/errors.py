"""Turn library errors into one clear line and the exit code users script against.

Exit codes: 0 ok, 1 the check or the run failed (bad checkpoint, runtime failure),
2 bad usage (wrong flags, paths that are not what the command needs). Every error mfsdp
raises on purpose derives from `MfsdpError`, whose kind carries the code, so this module
is the one place that maps errors: each command group's `invoke` runs through
`report_errors`. Anything else is a bug in mfsdp and keeps its traceback, so it gets
reported.

A command given `--json` promises its stdout is one JSON object, failed or not: a script
piping it to `jq` must not choke on empty output. Its error then also goes to stdout as
`{"error": <message>, "exit_code": <code>}` (the `error:` line on stderr stays).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import gc
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from cli import stop_signals
from cli.checked_stdout import CheckedStdout, guard_stdout
from cli.given_once import OnceGroup
from cli.json_text import json_text, shown_bytes
from cli.lost_peer import LOST_CONTACT, peer_said
from cli.main import discard_stdout, end_on_closed_stdout, guard_stderr, hold_signals, settle
from cli.stop import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated
from cli.stop import terminated as _terminated
from mfsdp_ckpt.check.printable import said_by
from mfsdp_ckpt.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    MfsdpError,
    on_stranded_error,
)
from mfsdp_ckpt.format.path_urls import url_refusal
from mfsdp_ckpt.storage.file_errors import os_error_line
from mfsdp_ckpt.storage.output_path import collapse_dot_dot
from mfsdp_ckpt.storage.tensor_memory import is_allocation_failure, memory_failure
from trainer.env_ints import env_int
from trainer.memory_estimate import states_advice

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "READ_PATH",
    "GivenPath",
    "MfsdpGroup",
    "Terminated",
    "fail",
    "json_option",
    "on_interrupt",
    "remember_json",
    "report_errors",
    "settle_command",
    "stdout_failure",
]

# Between a launched rank and cli/torchrun.py only (never mfsdp's own exit code): this rank
# stopped because another one did, so the launcher reports that one instead.
EXIT_PEER_LOST = 3
# How gloo and the c10d store word a peer process that went away (its sockets closed, or
# no reply in time) in the RuntimeError they raise.
PEER_LOST_SIGNS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "timed out",
    "Timed out",
)
# Keys a launched rank adds to its torchrun error file (`_tell_torchrun`)
SAID, ALIKE, LOST_PEERS = "mfsdp_said", "mfsdp_alike", "mfsdp_lost_peers"
# Set by cli/torchrun.py: the folder where a rank that gets a SIGINT leaves its number
# (`_mark_interrupted`)
INTERRUPTED_RANKS = "MFSDP_INTERRUPTED_RANKS"
JSON_OUTPUT = "mfsdp.json_output"  # click ctx.meta key (shared by nested contexts)
INTERRUPTED = "mfsdp.interrupted"  # ctx.meta key: what the running command says on Ctrl-C

T = TypeVar("T")


# The type of a path argument a library function reads: one this user may not read is that
# function's failure to report (exit 1, naming what it could not open), not click's
# "is not readable" usage error (exit 2).


class GivenPath(click.Path):
    """A path option or argument that refuses an empty value: `--out "$OUT"` with OUT unset
    named the current directory, and `mfsdp data synthetic` wrote its tables there. It
    refuses a URL too (`urls_said_later`: where the command names URLs itself):
    `--out file:///abs/x` wrote the export to the relative `./file:/abs/x`, `--out
    gs://b/x` to `./gs:/b/x`, and exit 0 said it was written (`path_urls.is_url_not_path`
    says which values are URLs). An `output` path (a directory the command writes) comes
    without its `..` (`output_path.collapse_dot_dot`): `--out P/new/..` was checked as a
    path naming nothing, then written into the non-empty `P`. The empty value's line offers
    `.` only where the option takes the current directory (`current_dir_ok`; by default a
    directory read, not written): it was offered to every path option, and `--out .` of
    export-hf, import-hf and the demo, or `--config .`, refused what it advised."""

    def __init__(
        self,
        *args: Any,
        urls_said_later: bool = False,
        output: bool = False,
        current_dir_ok: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.urls_said_later = urls_said_later
        self.output = output
        self.current_dir_ok = (
            self.dir_okay and not output if current_dir_ok is None else current_dir_ok
        )

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            here = ", or . for the current directory" if self.current_dir_ok else ""
            self.fail(f"is empty (an unset shell variable?); give a path{here}", param, ctx)
        if isinstance(value, str) and not self.urls_said_later:
            refusal = url_refusal(value, LOCAL_PATHS_ONLY)
            if refusal is not None:
                self.fail(refusal, param, ctx)
        converted = super().convert(value, param, ctx)
        return (
            collapse_dot_dot(converted) if self.output and isinstance(converted, str) else converted
        )


# What a URL other than a `file:` one of this machine is told where a command wants a path
LOCAL_PATHS_ONLY = (
    "give a local path (only `mfsdp ckpt export-hf` reads a checkpoint at a URL, and every"
    " command writes local files)"
)


# validate, inspect and import-hf name a URL themselves (`path_refusals.refuse_url`), with the
# schemes export-hf reads (its CKPT, which reads them)
READ_PATH = GivenPath(readable=False, urls_said_later=True)


def remember_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """`--json`'s callback: note on the context that errors must be JSON on stdout too."""
    if value:
        ctx.meta[JSON_OUTPUT] = True
    return value


def json_option(
    help: str, expose_value: bool = True
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command's `--json` flag (passed as `as_json` unless not `expose_value`; `help`: what
    it prints). Declared here only: a `--json` without `remember_json` as its callback printed
    its errors on stderr alone, and a script piping stdout to `jq` read empty output."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help=help,
        callback=remember_json,
        expose_value=expose_value,
    )


def fail(
    message: str, code: int = EXIT_FAILED, as_json: bool | None = None, *, abandon: bool = False
) -> NoReturn:
    """Print `error: <message>` (names from checkpoints made printable) and exit with `code`;
    with `as_json` (None: if the running command was given --json, so a check in a
    command's body fails this way too) the message and code also go to stdout as one JSON
    object. `abandon`: exit without waiting for other threads (`_exit`)."""
    from mfsdp_ckpt.check.printable import printable  # messages quote names from checkpoints

    settle(code)  # from here the exit status is `code`, whatever signal comes late
    text = printable(shown_bytes(message))
    if as_json is None:
        ctx = click.get_current_context(silent=True)
        as_json = ctx is not None and bool(ctx.meta.get(JSON_OUTPUT))
    if as_json:
        field = printable(shown_bytes(message), lookalikes=False)
        try:
            click.echo(json_text({"error": field, "exit_code": code}))
        except OSError:  # stdout is what failed (a full disk behind it): the line below says so
            discard_stdout()
    click.echo(f"error: {text}", err=True)
    _exit(code, abandon)


def _exit(code: int, abandon: bool = False) -> NoReturn:
    """`sys.exit(code)`, or with `abandon` an exit that does not wait for threads the user's
    code left running (`MfsdpError.abandons_threads`): Python joins every non-daemon thread
    at exit, and one that never ends kept a failed run alive after its error line. A failed
    training run exits so too once its failure is said (its metrics and loggers closed as
    the error left the trainer), in one process or in each rank: the interpreter's teardown
    of a process that ran a process group, with the failed run's objects still held by the
    error, sometimes aborted ("terminate called without an active exception" under the
    error line, exit -6 instead of the command's code). What the user's code expects of an
    exit is still done first: its atexit hooks run and its open files are flushed
    (`_flush_open_files`); only the interpreter's own teardown is skipped. Before either,
    in a process that ends with the command, what the user's code left running is ended
    (`leave_nothing_running`)."""
    if not leave_nothing_running():
        abandon = True
    if abandon or _ends_a_process_that_trained():
        _run_exit_hooks(bounded=abandon)
        _flush_open_files()
        os._exit(code)
    sys.exit(code)


# How long the exit hooks of an exit that abandons threads may take (a hook may wait on one)
EXIT_HOOKS_GRACE_S = 10.0


def _run_exit_hooks(bounded: bool) -> None:
    """Run the atexit hooks (a reward module's flush, multiprocessing's and logging's own);
    `bounded`, when threads the user's code left are abandoned, in a daemon thread given
    EXIT_HOOKS_GRACE_S: a hook that waits on such a thread would hold the exit for good, and
    skipping the hooks lost what a module wrote at exit."""
    if not bounded:
        atexit._run_exitfuncs()
        return
    hooks = threading.Thread(target=atexit._run_exitfuncs, name="mfsdp-exit-hooks", daemon=True)
    hooks.start()
    hooks.join(EXIT_HOOKS_GRACE_S)


def exit_leaving_nothing(code: int) -> NoReturn:
    """Exit with `code` from a process that ends with its command, once its outcome is
    decided, success included: what the user's code left running is ended first, and a
    thread of its that does not end is not waited for (`_exit`). A reward module keeping a
    pool whose workers never end, or a thread that never returns, held a finished run
    after its last line for good."""
    if leave_nothing_running():
        sys.exit(code)
    _exit(code, abandon=True)


def leave_nothing_running() -> bool:
    """In a process that ends with its command, whose outcome is decided: end the processes
    the user's code left (a `multiprocessing.Pool` a reward module kept, which exit joined
    without a bound: the run hung after its error line) and wait briefly for the threads it
    left (`trainer.leftovers.end_leftovers`); whether the exit may join every thread left.
    Elsewhere (a caller running commands in-process) nothing is touched: True."""
    from cli.main import ends_with_command

    if not ends_with_command():
        return True
    from trainer.leftovers import end_leftovers

    return end_leftovers()


def _flush_open_files() -> None:
    """Flush every open file object, as the interpreter's teardown would have, before
    `os._exit` skips it: the user's code (a reward module's per-sample log, kept open at
    module level) lost what it had buffered when a run failed. Then its atexit hooks have
    run (`_exit`): multiprocessing's ends its daemon helpers, logging's flushes handlers."""
    for held in gc.get_objects():
        # By type: isinstance would read each object's __class__, which some objects warn
        # of (torch.distributed's deprecated reduce_op), a line under the error.
        if issubclass(type(held), io.IOBase):
            with contextlib.suppress(Exception):  # closed, detached, unwritable, a full disk
                if not held.closed and held.writable():
                    held.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def stdout_failure(err: OSError) -> str | None:
    """The error line for `err` when printing to stdout raised it (other than a broken pipe:
    `end_on_closed_stdout`), stdout then pointed at /dev/null; None for any other error."""
    if err.errno == errno.EPIPE or not _writing_stdout(err):
        return None
    discard_stdout()
    return f"stdout: cannot write the command's output ({err.strerror})"


def _writing_stdout(err: OSError) -> bool:
    """Whether `err` came from printing to stdout: raised by the checked stdout of a process
    that ends with its command (`CheckedStdout.write`, a short write too), or by a caller's
    own stdout in `click.echo` without err=True: stdout redirected onto a full disk or
    /dev/full. errno's line names no file then, so the error must say it was stdout."""
    frame = None
    trace = err.__traceback__
    while trace is not None:
        frame, trace = trace.tb_frame, trace.tb_next
    if frame is not None and frame.f_code is CheckedStdout.write.__code__:
        return True
    return (
        frame is not None
        and frame.f_code.co_name == "echo"
        and frame.f_globals.get("__name__") == "click.utils"
        and frame.f_locals.get("err") is False
    )


def on_interrupt(message: Callable[[], str]) -> None:
    """Have the running command end a Ctrl-C with `error: <message()>` instead of `error:
    interrupted`: a training run says which checkpoint the next run resumes from."""
    click.get_current_context().meta[INTERRUPTED] = message


# What frees enough memory for a command, by its group: training holds a batch's activations,
# the checkpoint commands a tensor at a time (conversion, validate --deep).
_MEMORY_ADVICE = {
    "train": "free memory, lower the batch or sequence length, or raise the process's limit:"
    " ulimit -v",
    "ckpt": "the largest tensor must fit: free memory or raise the process's limit: ulimit -v",
}
_ANY_MEMORY_ADVICE = "free memory or raise the process's limit: ulimit -v"


def _memory_advice(ctx: click.Context) -> str:
    """The advice for the group of the command `ctx` runs: `ctx` is the root's (its
    subcommand is the group: `mfsdp ckpt export-hf`) or a group's run on its own (`train`
    in a rank torchrun started). A training run whose model states alone were found too
    large for the memory before it built the model (`states_advice`) says so: a smaller
    batch frees nothing near enough."""
    for name in (ctx.command.name, ctx.invoked_subcommand):
        if name in _MEMORY_ADVICE:
            return (name == "train" and states_advice()) or _MEMORY_ADVICE[name]
    return _ANY_MEMORY_ADVICE


def _out_of_memory(err: BaseException, advice: str) -> str:
    """One line for an allocation that failed where no mfsdp code named what it held. An
    OSError says errno's words alone: the file a writer attached to it (`[Errno 12] Cannot
    allocate memory: 'PATH'`) is not what ran out."""
    said = os.strerror(err.errno) if isinstance(err, OSError) and err.errno else said_by(err)
    first = said.strip().splitlines()[0] if said.strip() else ""
    return f"out of memory{f': {first}' if first else ''} ({advice})"


def report_errors(
    run: Callable[[], T],
    as_json: Callable[[], bool] = lambda: False,
    interrupted: Callable[[], str] = lambda: "interrupted",
    memory_advice: Callable[[], str] = lambda: _ANY_MEMORY_ADVICE,
) -> T:
    """Run a command: an `MfsdpError` becomes `error: <message>` and its kind's exit code
    (and a JSON object on stdout when `as_json()`: the command was given --json); Ctrl-C
    becomes `error: <interrupted()>` and exit 130.

    An OSError is the machine failing the run (disk full, a directory that cannot be
    written; the message names the path), not a bug: exit 1 in one line too, except a name
    too long for the file system, which only a path given to the command can be (exit 2:
    `Path.exists()` raises it rather than saying no). Running out of memory (a bare
    MemoryError, torch's allocator failing on the CPU or the GPU, a library whose import
    cannot map it: `memory_failure`) is the machine too: exit
    1, one line, with `memory_advice()` on what frees enough for the command. A broken pipe
    (`mfsdp ... | head`) ends quietly with 141, as SIGPIPE ends Unix tools. Any error after a
    Ctrl-C is the interrupt: one cut into an import comes out as the library's own (numpy's
    "CPU dispatcher tracer already initialized" when it is imported again).
    """
    if _in_launched_rank():  # it writes to the launching mfsdp's stderr itself
        guard_stderr()
        guard_stdout()  # rank 0's result is the command's
    _watch_for_ctrl_c()
    installed = _watch_for_sigterm()
    on_stranded_error(
        lambda err: _fail_once(
            said_by(err), err.exit_code, as_json(), every_rank=err.every_rank, abandon=True
        )
    )
    try:
        result = run()
        settle_command(EXIT_OK)  # the command's work is done and its result printed
        return result
    except SystemExit as ended:  # a command ending itself with its code
        settle_command(ended.code if isinstance(ended.code, int) else None)
        raise
    except MfsdpError as err:
        message, code = _or_interrupted(said_by(err), err.exit_code, interrupted)
        _fail_once(
            message,
            code,
            as_json(),
            every_rank=err.every_rank,
            abandon=err.abandons_threads,
        )
    except OSError as err:
        if err.errno == errno.EPIPE:
            end_on_closed_stdout()
        if is_allocation_failure(err):  # ENOMEM: not the path it names
            _fail_once(
                *_or_interrupted(_out_of_memory(err, memory_advice()), EXIT_FAILED, interrupted),
                as_json(),
                every_rank=True,
            )
        if err.errno == errno.ENAMETOOLONG:  # a path as typed that no file can have
            message = f"{err.filename}: name too long for the file system"
            _fail_once(*_or_interrupted(message, EXIT_USAGE, interrupted), as_json())
        written = stdout_failure(err)
        if written is not None:
            _fail_once(*_or_interrupted(written, EXIT_FAILED, interrupted), False)
        _fail_once(*_or_interrupted(os_error_line(err), EXIT_FAILED, interrupted), as_json())
    except KeyboardInterrupt as err:
        if isinstance(err, Terminated) or _terminated.is_set():  # DCP re-raises it as Ctrl-C
            code = stop_signals.exit_code()
            _fail_once(stop_signals.said(_line_held(interrupted, code)), code, as_json())
        _fail_once(_line_held(interrupted, EXIT_INTERRUPTED), EXIT_INTERRUPTED, as_json())
    except Exception as err:
        if _ctrl_c_seen.is_set():  # a Ctrl-C that landed in a library's import or call and
            line = _line_held(interrupted, EXIT_INTERRUPTED)  # came out as its own error
            _fail_once(line, EXIT_INTERRUPTED, as_json())
        memory = memory_failure(err)
        if memory is not None:  # the same line from each rank a save's failure reached
            _fail_once(
                *_or_interrupted(_out_of_memory(memory, memory_advice()), EXIT_FAILED, interrupted),
                as_json(),
                every_rank=True,
            )
        if not peer_lost(err):
            _tell_torchrun_of_a_bug(err)
            raise
        message = f"{LOST_CONTACT}{peer_said(said_by(err))}"
        code = EXIT_PEER_LOST if _in_launched_rank() else EXIT_FAILED
        _fail_once(*_or_interrupted(message, code, interrupted), as_json())
    finally:
        stop_signals.unwatch(installed)  # unless settled


def peer_lost(err: BaseException) -> bool:
    """Whether `err` is a collective failing because another rank's process went away (it
    failed, was interrupted or killed first): torch's DistError kinds, or gloo's plain
    RuntimeError about the closed connection. Not a bug here, and that rank's own error is
    the one to show. Only in a process torchrun started (RANK set): a lone one has no peers,
    and its "timed out" is some other failure."""
    distributed = sys.modules.get("torch.distributed")  # not loaded: no peers to lose
    if "RANK" not in os.environ or distributed is None or not isinstance(err, RuntimeError):
        return False
    dist_error = getattr(distributed, "DistError", None)
    if dist_error is not None and isinstance(err, dist_error):
        return True
    return any(sign in said_by(err) for sign in PEER_LOST_SIGNS)


_ctrl_c_seen = threading.Event()


def _note_ctrl_c(signum: int, frame: Any) -> None:
    """Raise the KeyboardInterrupt Python raises anyway, noting it first. A launched rank
    raises it once: torchrun passes the terminal's Ctrl-C on to its ranks again, and a second
    interrupt landing in the rank's cleanup (or in its error handling) cut the cleanup short
    and printed a traceback; torchrun kills ranks that do not stop in time."""
    if _in_finalizer(frame):
        _deliver_again(signum)
        return
    repeated = _ctrl_c_seen.is_set()
    _ctrl_c_seen.set()
    if not repeated:
        _mark_interrupted()
    if not (repeated and _in_launched_rank()):
        signal.default_int_handler(signum, frame)


def _mark_interrupted() -> None:
    """In a rank torchrun started (cli/torchrun.py names the folder): leave this rank's
    number in INTERRUPTED_RANKS as its SIGINT comes. A rank interrupted alone (`kill -INT`
    of it; the launching mfsdp got nothing) closes its connections as it stops, and the
    ranks waiting for it lose contact and exit first: torchrun, which ends the rest with
    SIGTERM once one has failed, saw their "lost contact" alone and named rank 1 for rank
    0's interrupt. A mark that cannot be made leaves the run reported as before."""
    folder, rank = os.environ.get(INTERRUPTED_RANKS), os.environ.get("RANK")
    if folder and rank is not None:
        with contextlib.suppress(OSError):
            os.close(os.open(os.path.join(folder, rank), os.O_WRONLY | os.O_CREAT, 0o600))


def _in_finalizer(frame: Any) -> bool:
    """Whether `frame` runs inside a `__del__`. Python drops an exception raised there (it
    prints "Exception ignored in ..." with a traceback), so a Ctrl-C that landed while the
    garbage collector ran a finalizer (tokenizers' regex objects, while the demo built its
    data) was lost, and the command ran on to the end."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _deliver_again(signum: int) -> None:
    """Send `signum` to this process again in a moment, once the finalizer has returned."""
    again = threading.Timer(0.05, os.kill, (os.getpid(), signum))
    again.daemon = True
    again.start()


def _watch_for_ctrl_c() -> None:
    """Note Ctrl-C as it arrives. It can land inside a library call that turns it into an
    error of its own (torch's serializer: "enforce fail ... unexpected pos"), so a save it cut
    short reads as a failed write; `_or_interrupted` reports it as the interrupt it was.
    In a rank `mfsdp train` launched, SIGHUP, SIGQUIT and SIGUSR1 are Ctrl-C too (where their
    action is the default): a scheduler signals every process of a job (Slurm's
    `--signal=USR1@T`), and their default action killed the rank mid-save. SIGTERM keeps
    its default there: torchrun ends the ranks left after one failed with it."""
    _ctrl_c_seen.clear()  # a command run before this one (tests, notebooks) does not count
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _note_ctrl_c)
    if _in_launched_rank():
        for number in stop_signals.STOP_SIGNALS:
            if number != signal.SIGTERM and signal.getsignal(number) == signal.SIG_DFL:
                signal.signal(number, _note_ctrl_c)


def _watch_for_sigterm() -> list[int]:
    """Raise `Terminated` on SIGTERM, SIGHUP, SIGQUIT and SIGUSR1 (`cli.stop_signals`) while
    the command runs; the signals whose handler was set here (the caller restores their
    default; the entry point `cli.main` may have set the same one already). Not in a rank
    torchrun started: torchrun stops its ranks with SIGTERM and reports the rank that failed
    first itself."""
    _terminated.clear()
    return [] if "RANK" in os.environ else stop_signals.watch()


def _or_interrupted(message: str, code: int, interrupted: Callable[[], str]) -> tuple[str, int]:
    if _terminated.is_set():
        code = stop_signals.exit_code()
        return stop_signals.said(_line_held(interrupted, code)), code
    if _ctrl_c_seen.is_set():
        return _line_held(interrupted, EXIT_INTERRUPTED), EXIT_INTERRUPTED
    return message, code


def _line_held(interrupted: Callable[[], str], code: int) -> str:
    """`interrupted()`, the line a stopped command ends with, composed once its exit status
    `code` is settled (`settle`): a second Ctrl-C while a run's line was read from its run
    dir (a user's answer to a slow first one) raised inside it, and the command ended in a
    traceback with exit 1 instead of that line and 130."""
    settle(code)
    return interrupted()


# How long a rank other than 0 waits before it exits quietly with an error every rank meets
# alike: the launcher reports the first rank to end, and names its line "rank N: ..." unless
# another rank told the same error by then (`cli.torchrun._met_alike`).
ALIKE_EXIT_DELAY_S = 1.0


def _fail_once(
    message: str,
    code: int,
    as_json: bool = False,
    *,
    every_rank: bool = False,
    abandon: bool = False,
) -> NoReturn:
    """`fail`, except in a rank `mfsdp train --nproc-per-node N` started, where every rank
    meets the same config mistake and the same Ctrl-C: rank 0 says the mistake, the launching
    `mfsdp` says the interrupt, and the other ranks exit with the code without a line each;
    so too for an error every rank may raise alike (`every_rank`: a save that failed on a
    full disk, or out of memory, printed its line once per rank; one rank alone in it is
    reported by cli/torchrun.py from what it told, as rank 0 did not say it).
    A rank that lost its peers says nothing either: cli/torchrun.py reports the rank that
    stopped first (and this rank's message only when no rank said more)."""
    if _in_launched_rank():
        _ignore_ctrl_c()  # the rank is ending: a Ctrl-C now would only add a traceback
        if code == EXIT_INTERRUPTED:
            sys.exit(code)
        alike = code == EXIT_USAGE or every_rank
        quiet = code == EXIT_PEER_LOST or (alike and env_int("RANK", 0) != 0)
        lost = code == EXIT_PEER_LOST
        _tell_torchrun(message, said=not quiet, alike=alike, lost_peers=lost)  # if no rank says
        if quiet:
            if alike:  # rank 0 tells torchrun it too before this rank's exit is seen, or the
                time.sleep(ALIKE_EXIT_DELAY_S)  # launcher names this rank's line as its own
            _exit(code, abandon)
        settle_command()  # torchrun's SIGTERM, once another rank failed, must not cut the line
        if env_int("RANK", 0) != 0:  # their lines, but one JSON object: rank 0's
            as_json = False
    fail(message, code, as_json, abandon=abandon)


def settle_command(code: int | None = None) -> None:
    """The command's outcome is decided (its result is about to be printed, or it ended with
    `code`): `settle`, and in a rank `mfsdp train` launched, which ends with its command too
    but is not started through `cli.main`, hold Ctrl-C and SIGTERM as well (`hold_signals`).
    There a Ctrl-C to the process group while the rank shut down (torch's atexit hooks take
    a while) raised KeyboardInterrupt inside one and printed its traceback, and a SIGTERM
    ended a rank that had finished, which torchrun then reported as a failure."""
    settle(code)
    if _in_launched_rank():
        hold_signals(code)


def _ends_a_process_that_trained() -> bool:
    """Whether the command ends this process (`cli.main.ends_with_command`) and a process
    group was started in it (a training run: `trainer.distributed`). A caller running
    commands in-process (a test) is not one, and must not be ended by `_exit`."""
    from cli.main import ends_with_command

    distributed = sys.modules.get("trainer.distributed")  # imported by every training run
    return ends_with_command() and distributed is not None and distributed.started_a_group()


def _in_launched_rank() -> bool:
    """Whether this process is a rank that `mfsdp train --nproc-per-node N` started."""
    from cli.launch import CONFIG_CHECKED  # set in the ranks by the launching mfsdp only

    return "RANK" in os.environ and bool(os.environ.get(CONFIG_CHECKED))


def _ignore_ctrl_c() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _tell_torchrun_of_a_bug(err: Exception) -> None:
    """In a launched rank, leave a bug's one line (`error_line`) in torchrun's error file
    before its traceback ends the rank: torchrun's own message for a rank that left none is
    a placeholder ("To enable traceback see ..."), which was the launcher's line and its
    JSON object's `error`. Said as not printed: the traceback is no `error:` line."""
    if _in_launched_rank():
        from mfsdp_ckpt.check.printable import error_line

        _tell_torchrun(error_line(err), said=False)


def _tell_torchrun(
    message: str, *, said: bool = True, alike: bool = False, lost_peers: bool = False
) -> None:
    """Leave the message in the error file torchrun gives each rank (its reply format), with
    whether this rank prints it (`said`; rank 0's line comes with the run's JSON object under
    --json), whether every rank may meet it alike (`alike`: cli/torchrun.py then says it
    without naming a rank, as one process would) and whether it is this rank's lost contact
    with its peers (`lost_peers`: no failure of its own), whole or not at all: written in place, a
    rank stopped between the open and the write left an empty file, and torchrun crashed
    reading it. The temp file is made new
    (`temp_files.new_temp`): opened by a name made of the pid, a symlink placed there had
    the message written into the file it led to. A file that cannot be written is no error
    of the run's: the rank's own line still says what failed."""
    import time
    from pathlib import Path

    from mfsdp_ckpt.storage.temp_files import new_temp

    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    partial = None
    try:
        partial, fd = new_temp(Path(path))
        with os.fdopen(fd, "w") as handle:
            told = {"message": message, "timestamp": int(time.time())}
            json.dump({**told, SAID: said, ALIKE: alike, LOST_PEERS: lost_peers}, handle)
        os.replace(partial, path)
        partial = None
    except OSError:
        pass
    finally:
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink()


class MfsdpGroup(OnceGroup):
    """A command group whose commands report errors through `report_errors`, whether it is
    run as `mfsdp` or on its own (`python -m cli.train` under torchrun), and refuse an option
    given twice (`OnceGroup`)."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        """click's, but its `--help` or `--version` printed into a closed pipe ends with 141
        (`end_on_closed_stdout`), as a command's output does, not with click's exit 1."""
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            end_on_closed_stdout()

    def invoke(self, ctx: click.Context) -> Any:
        return report_errors(
            lambda: super(MfsdpGroup, self).invoke(ctx),
            lambda: bool(ctx.meta.get(JSON_OUTPUT)),
            lambda: ctx.meta.get(INTERRUPTED, lambda: "interrupted")(),
            lambda: _memory_advice(ctx),
        )
