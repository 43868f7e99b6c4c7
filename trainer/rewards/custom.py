"""Load a user's reward function from a python file (`reward.path`, `reward.name`).

This executes the file on purpose: it is the user's own code, named in the user's own config,
exactly like verl's `custom_reward_function`. Checkpoints and data files never reach here.

The user's code (its import and every call) runs with stdout sent to stderr
(`user_code_output`): its prints still show, but stdout stays the command's own (`--json`
writes one JSON object there), and in the working directory the command runs in (a checker
that `chdir()`s into a temp dir and forgets to change back made the run fail later, on its
own relative paths). A `sys.exit()` in it is a failure like any exception, not the end of
the run; only Ctrl-C (KeyboardInterrupt) passes through. What a failed or stopped call left
running is ended with it: the processes it started (`end_processes_started_since`).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import inspect
import multiprocessing
import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, TextIO

from mfsdp_ckpt.check.printable import error_line
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from trainer.leftovers import end_processes, processes_alive


class RewardError(MfsdpUsageError, ValueError):
    """A reward cannot be computed or loaded; the message names the file, function or data
    source."""


class RewardFunctionError(MfsdpFailedError, ValueError):
    """The user's reward function failed on a row: it raised, or returned something that is not
    a finite number (exit 1, the run failed). The message names the reward file, the function,
    the row's data_source (and `extra_info` index) and what went wrong."""


# How verl's reward managers call a reward function, and so how it is called here.
REWARD_KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")


def load_reward_function(
    path: str | Path, name: str = "compute_score", kwargs: Collection[str] = ()
) -> Callable:
    """The function `name` of the python file `path`, which is imported here: its top level
    runs now, as the user's own code (stdout sent to stderr), once per rank. Every way it
    can be unusable (no such file, a FIFO, a failing import or `sys.exit()`, no such name,
    a signature verl's keyword call cannot fill, the names of `kwargs`, reward.kwargs, among
    its keywords) is a `RewardError` naming reward.path or
    reward.name, raised while the run is built rather than at the first scored batch."""
    file = Path(path)
    if not os.path.lexists(file):
        raise RewardError(f"reward.path {str(file)!r}: no such file")
    try:  # a FIFO or a device: importing it would block or never end
        safe_files.regular_file(file)
    except CheckpointFileError as err:
        raise RewardError(f"reward.path {err}") from None
    spec = importlib.util.spec_from_file_location(f"mfsdp_user_reward_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise RewardError(f"reward.path {str(file)!r}: not a python file")
    module = importlib.util.module_from_spec(spec)
    try:
        with user_code_output():
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:  # sys.exit() at import would end the run, exit 0
        raise RewardError(
            f"reward.path {str(file)!r}: importing it failed: {error_line(err)}"
        ) from err
    function = getattr(module, name, None)
    if function is None:
        raise RewardError(f"reward.name {name!r}: {str(file)!r} defines no such function")
    if not callable(function):
        raise RewardError(f"reward.name {name!r} in {str(file)!r} is not callable")
    _check_signature(function, name, file, kwargs)
    return function


def _check_signature(function: Callable, name: str, file: Path, kwargs: Collection[str]) -> None:
    """Refuse, before the run loads a model, a function that cannot be called the way verl
    calls it: `name(data_source=, solution_str=, ground_truth=, extra_info=)` by keyword
    (`def compute_score(*args)` takes no keywords, `(data_source, solution_str, ground_truth)`
    no extra_info), with the names of `kwargs` (reward.kwargs) too."""
    keywords = list(dict.fromkeys([*REWARD_KEYWORDS, *kwargs]))
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without one: its first call says what is wrong
        return
    try:
        signature.bind(**dict.fromkeys(keywords))
    except TypeError as err:
        raise RewardError(
            f"reward.name {name!r} in {str(file)!r} cannot be called as "
            f"{name}({', '.join(f'{key}=...' for key in keywords)}) (verl's reward "
            f"signature{' with reward.kwargs' if kwargs else ''}): {err}"
        ) from None


@contextlib.contextmanager
def user_code_output() -> Iterator[None]:
    """Run the user's reward code with its output on stderr: stdout is the command's own (one
    JSON object under `--json`). Swapping `sys.stdout` alone left file descriptor 1 on the
    real stdout, so what a checker run as a subprocess printed (children inherit the
    descriptor), or `os.write(1, ...)`, or C code's printf, came before the JSON object; the
    descriptor is pointed at stderr too, and back once the call returns, raises or is stopped
    by its time limit (an awaited `async def` function runs inside). Nested or overlapping
    uses (threads) share one redirection, undone when the last of them ends. A thread the
    code started and left running prints to stderr after the call too (`_UserThreadsOnStderr`):
    its print once the call had returned came before the JSON object. The working directory
    the code changed is changed back, as stdout is."""
    before, cwd = set(threading.enumerate()), _working_directory()
    _enter_user_code()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _leave_user_code()
        if cwd is not None:
            with contextlib.suppress(OSError):  # removed meanwhile: the command's own error
                os.chdir(cwd)
        _keep_on_stderr(threads_started_since(before))


def _working_directory() -> str | None:
    """The working directory now; None when it no longer exists (nothing to go back to)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def threads_started_since(before: set[threading.Thread]) -> list[threading.Thread]:
    """The threads alive now that were not among `before`: those the user's code started and
    left running."""
    return [thread for thread in threading.enumerate() if thread not in before]


def end_processes_started_since(before: set[multiprocessing.process.BaseProcess]) -> None:
    """End the `multiprocessing` processes started since `before` that still run (a reward
    function waiting on its checker's process when its call failed or was stopped), and a
    pool they work for (`leftovers.end_processes`): multiprocessing joins every one at exit,
    and the run hung after its error line for as long as the process ran."""
    end_processes(processes_alive() - before)


# The SIGTERM handler of the command while the user's code runs (mfsdp's own: it raises
# Terminated, for the command's cleanup to run)
_command_sigterm: Any = None


def _default_sigterm_in_user_child() -> None:
    """In a process the user's code forked, during a call or from a thread it left running
    (a pool it keeps re-forks its workers there): SIGTERM's default action back, in place of
    the command's handler it inherited, so that SIGTERM ends it quietly (the handler's
    exception printed a traceback from a checker's process that was only being ended), and
    so for every other signal the command stops on with that handler (SIGHUP, SIGQUIT,
    SIGUSR1). A handler the user's code installed stays."""
    by_user = _users or threading.current_thread() in _user_threads
    if by_user and callable(_command_sigterm):
        with contextlib.suppress(ValueError):  # forked off another thread: none to change
            for number in signal.valid_signals():
                if signal.getsignal(number) is _command_sigterm:
                    signal.signal(number, signal.SIG_DFL)


os.register_at_fork(after_in_child=_default_sigterm_in_user_child)


# The threads the user's code started and left running: what they print goes to stderr
_user_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


class _UserThreadsOnStderr:
    """`sys.stdout` once the user's code has left a thread running: what that thread writes
    goes to stderr, as it did during the call; every other thread's writes (the command's
    own: its `--json` object) go to the stdout this wraps."""

    def __init__(self, stdout: TextIO):
        self.stdout = stdout

    def _stream(self) -> TextIO:
        return sys.stderr if threading.current_thread() in _user_threads else self.stdout

    def write(self, text: str) -> int:
        return self._stream().write(text)

    def flush(self) -> None:
        self._stream().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stdout, name)


def _keep_on_stderr(threads: list[threading.Thread]) -> None:
    """Send what `threads` (started by the user's code) print to stderr from now on."""
    if not threads:
        return
    _user_threads.update(threads)
    if not isinstance(sys.stdout, _UserThreadsOnStderr):
        sys.stdout = _UserThreadsOnStderr(sys.stdout)


_STDOUT_FD, _STDERR_FD = 1, 2
_redirect_lock = threading.Lock()  # guards the two below, whichever thread runs user code
_users = 0  # the user_code_output blocks running now
_command_stdout: int | None = None  # a copy of the command's stdout while descriptor 1 is stderr


def _enter_user_code() -> None:
    global _users, _command_stdout, _command_sigterm
    with _redirect_lock:
        _users += 1
        if _users == 1:
            _command_stdout = _stdout_to_stderr()
            _command_sigterm = signal.getsignal(signal.SIGTERM)


def _leave_user_code() -> None:
    global _users
    with _redirect_lock:
        _users -= 1
        if _users == 0:
            _restore_stdout()


def restore_command_stdout() -> None:
    """Point descriptor 1 back at the command's own stdout now, while the user's code may still
    run: where the run is ended under it (a call stuck in C code past reward.timeout_s), the
    error's JSON object belongs on stdout. No effect when it is not redirected."""
    with _redirect_lock:
        _restore_stdout()


def _stdout_to_stderr() -> int | None:
    """Point descriptor 1 at stderr; a copy of the command's stdout it pointed at, or None
    when the descriptors cannot be copied (1 or 2 closed): then only `sys.stdout` is swapped."""
    _flush_output()  # what the command printed so far belongs on its stdout
    try:
        saved = os.dup(_STDOUT_FD)
    except OSError:
        return None
    try:
        os.dup2(_STDERR_FD, _STDOUT_FD)
    except OSError:
        os.close(saved)
        return None
    return saved


def _restore_stdout() -> None:
    global _command_stdout
    saved, _command_stdout = _command_stdout, None
    if saved is not None:
        _flush_output()  # what the user's code wrote, buffered, belongs on stderr
        os.dup2(saved, _STDOUT_FD)
        os.close(saved)


def _flush_output() -> None:
    """Flush what Python and C's stdio hold for stdout and stderr, so that each buffered write
    reaches the descriptor it was written under; a stream that cannot be flushed (closed, a
    broken pipe) keeps its error for the command's own next write to report."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()  # type: ignore[union-attr]
    if _C_LIBRARY is not None:
        _C_LIBRARY.fflush(None)  # a C extension's printf, held by stdio


def _c_library() -> ctypes.CDLL | None:
    """The process's C library, whose stdio buffers C code's printf; None where it cannot be
    loaded by name (then only Python's buffers are flushed)."""
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


_C_LIBRARY = _c_library()
