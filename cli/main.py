"""The `mfsdp` entry point (pyproject's console script), kept small so that Ctrl-C and
SIGTERM are handled from its first instant.

Importing the command line (click and every command module: `cli.app`) takes 0.1-0.3 s.
A signal in that time ended the process as Python's defaults do: Ctrl-C with a
KeyboardInterrupt traceback, SIGTERM silently (exit -15), and with --json an empty
stdout where a script waits for one JSON object. Here SIGTERM (and SIGHUP, SIGQUIT and
SIGUSR1: `cli.stop_signals`) is caught before that import, and each signal ends the command
as `cli.errors` ends one it stopped: the `error:` line, the JSON object with --json, exit 130,
or 128 + the signal's number (143 for SIGTERM) after `SIGTERM: `.

Once the command's outcome is settled (its result printed, or its error line about to be),
a Ctrl-C or SIGTERM is ignored until the process exits: restoring Python's defaults there
let a SIGTERM sent just after an export printed its JSON end the process silently with
-15 (the export published, the script told it failed), and interpreter shutdown takes a
while once torch is loaded.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import select
import signal
import sys
import threading
from types import FrameType, ModuleType
from typing import Any, NoReturn

from cli import stop_signals
from cli.checked_stdout import DescriptorStream, guard_stdout
from cli.stop import EXIT_INTERRUPTED, Terminated

# Whether this process ends when the command does (main() called by the program itself),
# so that late signals may be ignored; a test calling main() in-process keeps its handlers.
_ends_with_command = False


def options_of(args: list[str]) -> list[str]:
    """The arguments before a `--` (after it they are the command's own, never mfsdp's)."""
    return args[: args.index("--")] if "--" in args else args


def json_asked(args: list[str]) -> bool:
    """Whether `--json` is among the options: an error then goes to stdout as JSON too."""
    return any(arg == "--json" or arg.startswith("--json=") for arg in options_of(args))


def main() -> None:
    """Run `mfsdp` on sys.argv, SIGTERM, SIGHUP, SIGQUIT and SIGUSR1 raising `Terminated`
    from the start (`cli.stop_signals`, as `cli.errors` has them raised while a command runs;
    not in a rank torchrun started, which it stops with SIGTERM itself), each held once it
    ended (`settle`), and nothing the user's code left running kept alive past it
    (`cli.errors.exit_leaving_nothing`)."""
    global _ends_with_command
    _ends_with_command = _called_as_the_program(sys._getframe(1))
    watched = [] if "RANK" in os.environ else stop_signals.watch()
    if _ends_with_command:
        guard_stderr()  # before any module takes sys.stderr (logging handlers, tqdm)
        guard_stdout()  # a short write (a disk filling) is an error, not a result cut short
    code: Any = None  # the exit status, once the command ended with one (not a traceback)
    try:
        _imported_app().run()
        sys.stdout.flush()  # output still buffered meets a closed pipe here, not at exit
        code = 0
    except BrokenPipeError:
        end_on_closed_stdout()
    except SystemExit as ended:
        code = 0 if ended.code is None else ended.code
        raise
    finally:
        settle()
        if not _ends_with_command:
            stop_signals.unwatch(watched)
        errors = sys.modules.get("cli.errors")  # not imported: no command (nor user code) ran
        if _ends_with_command and isinstance(code, int) and errors is not None:
            errors.exit_leaving_nothing(code)


# What a shell reports for a tool that SIGPIPE ended (128 + 13): the reader of its stdout went
# away (`mfsdp ... | head -1`). Not 1, which says the check or the run failed.
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE


def end_on_closed_stdout() -> NoReturn:
    """End quietly with `EXIT_CLOSED_PIPE` once writing stdout met a closed pipe, as Unix tools
    end: click's own handling exited 1 with no line, so `ckpt validate RUN | true` under
    `pipefail` called a valid checkpoint invalid, and an import that was written in full
    failed. What the command did before is kept."""
    settle(EXIT_CLOSED_PIPE)
    discard_stdout()
    sys.exit(EXIT_CLOSED_PIPE)


def discard_stdout() -> None:
    """Point file descriptor 1 at /dev/null once writing stdout failed: Python flushes
    stdout again at exit, and that second failure printed "Exception ignored ...
    BrokenPipeError" lines (the way Python's documentation gives for SIGPIPE)."""
    # no descriptor: a test's captured stdout
    with contextlib.suppress(OSError, ValueError, AttributeError):
        _discard(sys.stdout.fileno())


def _discard(fd: int) -> None:
    """Point descriptor `fd` at /dev/null: what is written to it from now on goes nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


class _BestEffortStderr(DescriptorStream):
    """Descriptor 2 for Python's sys.stderr, where a write that fails is dropped: stderr only
    tells a person what happens (notes, progress bars, log lines, the `error:` line), and the
    command's outcome is its own work and, under --json, the object on stdout. A full log
    volume (ENOSPC) or a reader that went away (EPIPE: `2>&1 >out.json | head`) made every
    note or bar line raise: a finished export exited 1 reporting "No space left on device",
    the failure's own `error:` line raised again and its JSON object was printed twice, and
    a closed stderr pipe was taken for a closed stdout (exit 141, the result discarded).
    After the first failure the descriptor points at /dev/null (`_discard`), so nothing
    tries again: not Python's flush at exit, nor C code writing to descriptor 2."""

    def write(self, data: Any) -> int:
        """Write all of `data`, or drop what the descriptor refuses; its length either way."""
        left = memoryview(data).cast("B")
        size = left.nbytes
        try:
            while left:
                try:
                    left = left[os.write(self._fd, left) :]
                except BlockingIOError:  # a non-blocking terminal that is busy: wait for it
                    select.select([], [self._fd], [])
        except OSError:
            with contextlib.suppress(OSError):
                _discard(self._fd)
        return size


def guard_stderr() -> None:
    """Make sys.stderr best effort (`_BestEffortStderr`) for every writer in this process:
    click.echo(err=True), print(file=sys.stderr), logging handlers, tqdm and warnings all
    write through sys.stderr. Left alone where sys.stderr is not this process's own
    (a caller capturing it) or has no descriptor."""
    stream = sys.stderr
    if stream is not sys.__stderr__ or stream is None:
        return
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    try:
        stream.flush()
    except OSError:  # already unwritable: what it holds is dropped with what follows
        with contextlib.suppress(OSError):
            _discard(fd)
            stream.flush()
    # Written through, with no BufferedWriter between: one kept what a write had put out
    # when a signal's exception came before the Python-level write returned, and wrote it
    # again at the next flush (a line said twice after Ctrl-C); TextIOWrapper lets go of its
    # bytes before it hands them on, so an interrupted write is never repeated.
    sys.stderr = io.TextIOWrapper(
        _BestEffortStderr(fd),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=True,
        write_through=True,
    )


def _called_as_the_program(caller: FrameType) -> bool:
    """Whether `main()` was called by the program's own entry point, which ends when it
    returns: the `mfsdp` console script, `python -c "...main()"` or `python -m cli.main`.
    Not a user's script or notebook cell that calls it among other work (a sweep catching
    SystemExit to go on to its next run): such a caller's process must not be ended by a
    failed command (`cli.errors._exit`), nor its signal handlers changed."""
    if caller.f_globals.get("__name__") != "__main__":
        return False
    filename = caller.f_code.co_filename
    return (
        os.path.basename(filename).removesuffix(".exe") == "mfsdp"
        or filename == "<string>"
        or os.path.abspath(filename) == os.path.abspath(__file__)
    )


def ends_with_command() -> bool:
    """Whether this process ends when the command does: the program itself called `main()`,
    or a rank's `python -m cli.train` (`command_ends_process`)."""
    return _ends_with_command


def command_ends_process() -> None:
    """Say that this process ends with the command it runs: an entry point other than
    `main()` (`python -m cli.train`, what `mfsdp train --nproc-per-node N` starts)."""
    global _ends_with_command
    _ends_with_command = True


def settle(code: int | None = None) -> None:
    """The command's outcome is decided (`code`, its exit status, where the caller knows it):
    in a process that ends with it, a Ctrl-C or SIGTERM from now on leaves that status alone
    (`hold_signals`). A caller running commands in-process keeps its handlers."""
    if _ends_with_command:
        hold_signals(code)


# How long the exit may still take once a Ctrl-C or SIGTERM came after the outcome was
# decided: interpreter shutdown with torch loaded takes seconds; past this the process ends.
LATE_SIGNAL_GRACE_S = 10.0

_settled = False  # whether `hold_signals` was called in this process
_settled_code: int | None = None  # the exit status it was told
_forcing_exit = threading.Lock()  # taken by the first late signal: its bounded wait runs


def hold_signals(code: int | None = None) -> None:
    """From now until the exit, a Ctrl-C or SIGTERM neither ends the process at once nor
    raises in it: its exit status stays the command's (`code`; a SIGTERM just after an export
    printed its JSON ended it with -15, the export published, the script told it failed).
    Nor is it ignored: an exit that stays stuck (user code left a process or thread that
    never ends) ends `LATE_SIGNAL_GRACE_S` after such a signal, with that status
    (`_late_signal`); ignored, both left the process alive for good. Processes forked
    from here on get the default handling (`_child_of_a_settled_process`)."""
    global _settled, _settled_code
    _settled = True
    if code is not None:
        _settled_code = code
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, *stop_signals.not_ignored()):
            signal.signal(number, _late_signal)


def _late_signal(signum: int, _frame: FrameType | None) -> None:
    """A Ctrl-C or SIGTERM after the outcome was decided: the exit goes on, bounded by
    `LATE_SIGNAL_GRACE_S` from the first such signal, then it is forced (`_force_exit`)."""
    if _forcing_exit.acquire(blocking=False):
        code = _settled_code if _settled_code is not None else 128 + signum
        threading.Thread(target=_force_exit, args=(code,), daemon=True).start()


def _force_exit(code: int) -> NoReturn:
    """End the process with `code` once `LATE_SIGNAL_GRACE_S` passed: what it still waits for
    at exit (a process or thread the user's code left) is left, what was written is flushed."""
    threading.Event().wait(LATE_SIGNAL_GRACE_S)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


_HELD = {signal.SIGINT, *stop_signals.STOP_SIGNALS}
_mask_before_fork = threading.local()  # the forking thread's signal mask, while it forks


def _before_fork() -> None:
    """After `hold_signals`, block Ctrl-C and SIGTERM while a process is forked: one that
    reached the child before `_child_of_a_settled_process` ran there was handled as the
    parent's exit (`_late_signal`), and the child then exited as the command would."""
    if _settled:
        _mask_before_fork.held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)


def _after_fork_in_parent() -> None:
    held = getattr(_mask_before_fork, "held", None)
    if held is not None:
        _mask_before_fork.held = None
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _child_of_a_settled_process() -> None:
    """In a process forked after `hold_signals` (a pool the user's code keeps re-forks its
    workers): Ctrl-C and SIGTERM handled as Python does by default, not as this command's
    exit is, once they are unblocked (`_before_fork`); one sent meanwhile comes then.
    Ignored there (as the exit once ignored them), `Pool.terminate()` at exit could not
    end such a worker and the run never exited."""
    global _settled, _settled_code, _ends_with_command
    held = getattr(_mask_before_fork, "held", None)
    if not _settled or held is None:
        return
    _settled, _settled_code, _ends_with_command = False, None, False
    defaults: dict[int, Any] = {
        signal.SIGINT: signal.default_int_handler,
        **{number: signal.SIG_DFL for number in stop_signals.STOP_SIGNALS},
    }
    for number, default in defaults.items():
        with contextlib.suppress(ValueError):  # forked off a thread Python cannot set it from
            handler = signal.getsignal(number)
            # SIGHUP, SIGQUIT, SIGUSR1 ignored are so from the start (`nohup`): left ignored
            ignored = handler == signal.SIG_IGN and number in (signal.SIGINT, signal.SIGTERM)
            if handler is _late_signal or ignored:
                signal.signal(number, default)
    if _forcing_exit.locked():
        _forcing_exit.release()
    _mask_before_fork.held = None
    signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _ignore_held_signals_to_the_end() -> None:
    """The last exit hook (registered as this module is imported, before any other): in a
    process whose outcome is settled, a Ctrl-C or SIGTERM is ignored for what is left of the
    exit. The interpreter's finalization, which follows the hooks, puts the default action
    back for each signal a Python handler holds (`_late_signal`): one arriving then ended a
    finished export with -2 or -15 (a few tens of ms after its result, torch loaded). An
    ignored signal it leaves ignored. Every wait a stuck exit makes (threads, child
    processes, the other exit hooks) comes before this hook, bounded by `_late_signal`."""
    if _settled and threading.current_thread() is threading.main_thread():
        for number in _HELD:
            signal.signal(number, signal.SIG_IGN)


atexit.register(_ignore_held_signals_to_the_end)
os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_child_of_a_settled_process,
)


def _imported_app() -> ModuleType:
    """`cli.app`, or the end of the command when a signal stopped its import."""
    try:
        from cli import app
    except KeyboardInterrupt as stopped:
        _stopped(isinstance(stopped, Terminated))
    return app


def _stopped(by_sigterm: bool) -> NoReturn:
    """End as `cli.errors` ends a command a signal stopped (nothing of it is imported yet):
    `error: interrupted` on stderr, with --json also the JSON object on stdout."""
    message, code = (
        (stop_signals.said("interrupted"), stop_signals.exit_code())
        if by_sigterm
        else ("interrupted", EXIT_INTERRUPTED)
    )
    hold_signals(code)  # a second one must not cut the lines
    if json_asked(sys.argv[1:]):
        from cli.json_text import json_text

        _write(sys.stdout, json_text({"error": message, "exit_code": code}))
    _write(sys.stderr, f"error: {message}")
    sys.exit(code)


def _write(stream: Any, line: str) -> None:
    """`line` to `stream`, unless it is closed or cannot be written (nothing to tell then)."""
    try:
        stream.write(line + "\n")
        stream.flush()
    except (AttributeError, OSError, ValueError):
        pass


def __getattr__(name: str) -> Any:
    """`from cli.main import app` (scripts and tests drive the click group): `cli.app`'s."""
    if name == "app":
        from cli.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":  # `python -m cli.main ...` ran nothing and exited 0
    # one module, not two: `settle`, imported by cli.launch, must set this run's state
    sys.modules.setdefault("cli.main", sys.modules[__name__])
    main()
