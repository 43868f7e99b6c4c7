"""torchrun for `mfsdp train --nproc-per-node N`, reporting the way every mfsdp command does.

Run as `python -m cli.torchrun TORCHRUN_ARGS`. Plain torchrun, when a rank fails, prints
its own traceback (ChildFailedError) and a table of failures under the rank's one-line
error, and exits 1 whatever the rank's exit code; on Ctrl-C it logs a warning per rank.
Here torchrun runs in this process instead: its agent's log lines are turned down unless
`mfsdp -v` asked for them, and it exits with the first failed rank's code (2 a usage
mistake, 1 a failed run, 130 interrupted), so the ranks' own messages are all a user sees.
A rank that stopped only because another one did (its collective lost the peer) exits
quietly with EXIT_PEER_LOST, so the one that stopped first is the one reported. A rank a
signal stopped that the run did not send (the out-of-memory killer's SIGKILL, a `kill -INT`
of that rank alone) could not say so: it is named here (`_stopped_by_signal`), and the
launching mfsdp, which names a file for it (`STOPPED_BY`), says it with the step reached
and the checkpoint the next run resumes from, as it says a Ctrl-C.

Every process of a run dies with the one that started it (Linux): the launching mfsdp starts
this one with a parent-death signal (`dies_with_parent`), and SIGTERM stops torchrun's agent,
which stops its ranks. A `kill -9` of the launching mfsdp (a scheduler's hard stop, the
out-of-memory killer) left this process, reparented to pid 1, and every rank training and
saving into the run dir, whose lock had died with the launcher: a second run into it then
started beside them. A `kill -9` of this process did the same to the ranks alone, so each
rank asks for a death signal of its own as it starts (`die_with_torchrun`: torch's agent
starts them from a multi-threaded process, where a pre-exec hook is not safe), and the
launching mfsdp waits until no process of the run lives (`await_run_processes`) before it
says which checkpoint is the newest and lets the run dir's lock go.

A signal stops the agent once (`_stop_once`): the launching mfsdp passes on a SIGINT,
SIGTERM, SIGHUP, SIGQUIT or SIGUSR1 it gets (a `kill -INT` of it alone reached nothing else,
and the ranks trained on), so when the whole process group got it too this process gets it
twice, and torch's agent, interrupted again while it waited for its ranks to stop, left them
stopping unwatched. Each reaches the ranks as SIGINT, so a SIGTERM stops them as Ctrl-C does
(a save in flight commits), and this process exits 128 + its number (143 for SIGTERM), 130
for Ctrl-C.

A rendezvous that cannot form ends in one line naming `--rdzv-endpoint` and what to do, not
torch's traceback after a silent wait (`_rendezvous_failed`); a one-machine run whose
endpoint's port is already held on this machine is refused before it waits (`_endpoint_taken`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any

from cli import stop_signals
from cli.errors import (
    ALIKE,
    ALIKE_EXIT_DELAY_S,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_PEER_LOST,
    EXIT_USAGE,
    INTERRUPTED_RANKS,
    LOST_PEERS,
    SAID,
)
from cli.json_text import json_text
from cli.lost_peer import LOST_CONTACT, machine_went_away, peer_said
from cli.main import EXIT_CLOSED_PIPE, end_on_closed_stdout, guard_stderr, hold_signals
from cli.result_said import RESULT_SAID, expect_result, result_said
from cli.std_streams import ensure_standard_streams
from cli.verbosity import LEVEL_VARIABLE
from mfsdp_ckpt.check.printable import cut_to, printable

AGENT_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.distributed.run")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# The environment's marks of a run's processes: LAUNCH_ID, set by the launching mfsdp for
# this process, is inherited by every rank (so it can find them once this process is gone);
# TORCHRUN_PID, set here, is the parent each rank checks it still has.
LAUNCH_ID = "MFSDP_LAUNCH_ID"
TORCHRUN_PID = "MFSDP_TORCHRUN_PID"
# SIGINT and SIGTERM always; the others unless this process was started ignoring them
# (`nohup`'s SIGHUP): `_stop_once`
STOP_SIGNALS = (signal.SIGINT, *stop_signals.STOP_SIGNALS)
# The one torch's agent is left to pass on as it came (`_stop_once`): it must be given one
LEFT_TO_THE_AGENT = "SIGUSR2"
# Set by the launching mfsdp: the file this process leaves what stopped the ranks in
# (`rank 1: killed by SIGKILL ...`), when a signal the run did not send did.
STOPPED_BY = "MFSDP_STOPPED_BY"
# Said after a rank that SIGKILL ended: the kernel's out-of-memory killer sends it, and says so
# in the kernel log only.
OUT_OF_MEMORY_HINT = " (out of memory? see dmesg)"
INTERRUPTED = "interrupted"  # what stopped a rank that got a SIGINT of its own
OTHER_MACHINES_GRACE_S = ALIKE_EXIT_DELAY_S + 2.0  # `_keep_the_store_up`


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def dies_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` that has the child sent `sig` when the thread starting it ends (which,
    for the thread that waits on the child, is when this process dies, `kill -9` included);
    None where prctl is not there (not Linux). Resolved here, before the fork, so the child
    only makes the call; a parent that died before it took hold is seen by the child, which
    then exits at once (the signal would never come)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(128 + int(sig))

    return preexec


def die_with_torchrun() -> None:
    """In a rank this module's torchrun started: be killed (SIGKILL: nothing is left to
    report to, and a handler must not keep it training) when that torchrun dies; a rank
    whose torchrun died before this took hold exits at once. torch's agent starts the ranks
    from the main thread of this process, whose end is the process's. A no-op elsewhere."""
    agent = os.environ.get(TORCHRUN_PID)
    prctl = _prctl()
    if agent is None or prctl is None:
        return
    prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != int(agent):
        os._exit(128 + int(signal.SIGKILL))


def run_processes(launch_id: str) -> list[int]:
    """The pids of the live processes of the run marked `launch_id` (this user's, which carry
    `LAUNCH_ID=launch_id` in their environment: torchrun and its ranks); none where there is
    no /proc. A process that has exited shows an empty environment, so it is not counted."""
    mark = f"{LAUNCH_ID}={launch_id}".encode()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    found = []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environment = handle.read()
        except OSError:  # gone meanwhile, or another user's
            continue
        if mark in environment.split(b"\0"):
            found.append(int(entry))
    return found


def await_run_processes(launch_id: str, timeout: float) -> None:
    """Return once no process of the run marked `launch_id` lives: a rank orphaned by its
    torchrun's death has its death signal coming, and one still starting exits at
    `die_with_torchrun`. Those left after `timeout` seconds are killed, and given a few
    more to go (one stuck in the kernel may never go: it is left then)."""
    deadline = time.monotonic() + timeout
    killed = False
    while left := run_processes(launch_id):
        if time.monotonic() > deadline:
            if killed:
                return
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed, deadline = True, time.monotonic() + 5
        time.sleep(0.05)


def rank_exit_code(exitcode: int) -> int:
    """The code `mfsdp train` exits with for a rank that exited with `exitcode` (negative:
    killed by that signal): a closed stdout pipe's 141 too, which says the output's reader
    went away, not that the run failed."""
    if exitcode in (EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_CLOSED_PIPE):
        return exitcode
    return EXIT_INTERRUPTED if exitcode == -signal.SIGINT else EXIT_FAILED


def _deciding_failure(
    failures: dict[int, Any], interrupted: frozenset[int] = frozenset()
) -> tuple[int, Any]:
    """(rank, ProcessFailure) that says why the run stopped, lowest rank first within each
    kind: a rank that exited with its own code (it said why), then one a signal the run did
    not send stopped (`_stopped_by_signal`; `interrupted`: the ranks that got a SIGINT of
    their own), then one that lost its peers (they went away unseen), and last one torchrun
    terminated once another had failed. torchrun's own "first failure" goes by timestamps in
    whole seconds, so it can pick any of them."""
    first_seen = next(iter(failures), None)
    return min(failures.items(), key=lambda item: _precedence(item, first_seen, interrupted))


def _precedence(
    item: tuple[int, Any], first_seen: int | None, interrupted: frozenset[int]
) -> tuple[bool, bool, bool, int]:
    """The sort key of `_deciding_failure`: whether the rank said why, whether a signal of its
    own stopped it, whether it lost its peers, its number (False first)."""
    rank, failure = item
    code = failure.exitcode
    signalled = _stopped_by_signal(rank, failure, first_seen, interrupted) is not None
    own_code = code > 0 and code != EXIT_PEER_LOST
    said_why = not signalled and (own_code or _told_before_terminated(failure))
    return not said_why, not signalled, code != EXIT_PEER_LOST, rank


def _told_before_terminated(failure: Any) -> bool:
    """Whether torchrun's SIGTERM stopped a rank that had already left its own failure in its
    error file (`cli.errors._tell_torchrun`: a bug's line, written before its traceback). A
    peer that lost contact with it can exit first (a loaded machine), and torchrun then ends
    it mid-traceback: the peer's "lost contact" was named for the rank that failed."""
    told = failure.error_file_data
    if failure.exitcode != -signal.SIGTERM or not isinstance(told, dict):
        return False
    return SAID in told and not told.get(LOST_PEERS)  # a peer's lost contact is no failure


def _stopped_by_signal(
    rank: int, failure: Any, first_seen: int | None, interrupted: frozenset[int]
) -> str | None:
    """How a signal the run did not send stopped `rank`: `interrupted` (a SIGINT of its own:
    it left its number in `interrupted` as it came, exited 130 or died of it; a rank
    interrupted alone closes its connections as it stops, so the ranks waiting for it lose
    contact and end first, and torchrun's SIGTERM ends it), or `killed by SIG...`; None for
    a rank that exited with a code of its own, or that torchrun's SIGTERM stopped once
    another had failed. A SIGTERM is torchrun's own except for the rank it saw fail first
    (`failures` keeps the order torchrun saw them in, and it terminates the others only
    after): that rank's came from elsewhere (`kill PID`, a scheduler)."""
    code = failure.exitcode
    if rank in interrupted or code in (EXIT_INTERRUPTED, -signal.SIGINT):
        return INTERRUPTED
    if code >= 0 or (code == -signal.SIGTERM and rank != first_seen):
        return None
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name}{OUT_OF_MEMORY_HINT if code == -signal.SIGKILL else ''}"


def _unsaid(failure: Any, failures: dict[int, Any]) -> str | None:
    """The line to print for the deciding failure, a rank's own ending, when no rank printed
    one: an error no rank said (one every rank may meet alike, which the ranks other than 0
    leave unsaid, when rank 0 did not get to say it), or a rank that lost its peers with
    none of them saying why."""
    code = failure.exitcode
    if _told_before_terminated(failure):
        return None if _said(failure) else failure.message
    if code in (EXIT_FAILED, EXIT_USAGE):
        said = any(_said(other) and other.message == failure.message for other in failures.values())
        return None if said else failure.message
    if code == EXIT_PEER_LOST:
        return failure.message
    return None


def _said(failure: Any) -> bool:
    """Whether the failed rank printed its own error line (rank 0: with the run's JSON object
    under --json), as it told in its error file (`cli.errors._tell_torchrun`); one that left
    no such word (a traceback) said what it said if it exited with a code of its own."""
    told = failure.error_file_data
    said = told.get(SAID) if isinstance(told, dict) else None
    return failure.exitcode in (EXIT_FAILED, EXIT_USAGE) if said is None else bool(said)


def _named(rank: int, failure: Any, line: str, failures: dict[int, Any]) -> str:
    """`line` as the launcher says it: after the rank's number, unless it is an error every
    rank may meet alike (`_met_alike`: it is the run's, whichever rank got to it first)."""
    alike = line == failure.message and _met_alike(rank, failure, failures)
    return line if alike else f"rank {rank}: {line}"


def _met_alike(rank: int, failure: Any, failures: dict[int, Any]) -> bool:
    """Whether the failed `rank` told an error every rank may meet alike (`cli.errors`:
    a checkpoint refused before DCP reads it) and another rank told the same one. The
    rank's word alone is not enough: each rank checks its own view of the files (a node's
    copy of the checkpoint, or its mount, may differ), and a rank that refused alone, its
    peers waiting for it, was said without its number, so no one could tell which failed."""
    told = failure.error_file_data
    if not (isinstance(told, dict) and told.get(ALIKE)):
        return False
    return any(
        other != rank and peer.message == failure.message for other, peer in failures.items()
    )


def _quiet_agent_logs() -> None:
    """torchrun's agent logs a warning per rank on Ctrl-C and an error line per failure; unless
    `mfsdp -v`, only CRITICAL gets through (its loggers set their own levels when their
    modules load, so each one present is turned down, and the parents for those to come)."""
    if os.environ.get(LEVEL_VARIABLE):
        return
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith(AGENT_LOGGERS) and isinstance(logger, logging.Logger):
            logger.setLevel(logging.CRITICAL)
    for name in AGENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


@contextlib.contextmanager
def _quiet_native_logs() -> Iterator[None]:
    """torch's C++ code logs the rendezvous store's socket errors with its stack frames (dozens
    of lines, above the run's one `error:` line); unless `mfsdp -v` or TORCH_CPP_LOG_LEVEL
    asks for them, this process logs only fatal ones. The level is read as torch loads
    (within this block), and the ranks do not inherit it."""
    if os.environ.get(LEVEL_VARIABLE) or "TORCH_CPP_LOG_LEVEL" in os.environ:
        yield
        return
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        yield
    finally:
        del os.environ["TORCH_CPP_LOG_LEVEL"]


def _quiet_timer_finalizer() -> None:
    """Drop the one error torch's rendezvous keep-alive timer raises as the run ends: its
    finalizer joins the timer's thread, and when the last reference to the timer goes in
    that thread itself (a keep-alive call holding the handler as the agent lets it go) it
    fails with "cannot join current thread", which Python prints as "Exception ignored in:
    <finalize object>" and a traceback under the run's one-line ending. The thread is a
    daemon that stops with this process; any other unraisable error is printed as before."""
    printed = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        error, trace = unraisable.exc_value, unraisable.exc_traceback
        while trace is not None and trace.tb_next is not None:
            trace = trace.tb_next
        code = trace.tb_frame.f_code if trace is not None else None
        joined = isinstance(error, RuntimeError) and "cannot join current thread" in str(error)
        if joined and code is not None and code.co_name == "join":
            caller = trace.tb_frame.f_back if trace is not None else None
            if caller is not None and caller.f_code.co_name == "_stop_thread":
                return
        printed(unraisable)

    sys.unraisablehook = hook


# Where torch's agent reads the signals it handles itself, and torchrun's option naming them
SIGNALS_HANDLED = "TORCHELASTIC_SIGNALS_TO_HANDLE"
SIGNALS_OPTION = "PET_SIGNALS_TO_HANDLE"
# The signals that stopped this process (the first one only: `_stop_once`)
_stopped_by: list[int] = []


def _stop_once() -> None:
    """Have the STOP_SIGNALS stop torch's agent as its own handler does (it raises
    SignalException, and the agent passes the signal on to the ranks and waits for them),
    but only the first one: a second (the launching mfsdp passes on what the process group
    got too) raised again inside that wait, and this process ended while its ranks were
    still stopping. The agent is told to leave these signals to this handler (in
    TORCHELASTIC_SIGNALS_TO_HANDLE, which it reads as it starts the ranks, and in
    PET_SIGNALS_TO_HANDLE, the default of torchrun's `--signals-to-handle`, which newer
    torch copies over the former: its own handler then took them again); it keeps any
    other one named there (LEFT_TO_THE_AGENT when none is: an empty list is logged as a
    failure). SIGHUP, SIGQUIT and SIGUSR1 this process was started ignoring (`nohup`, a
    background job of a non-interactive shell) stay ignored.

    Each reaches the ranks as SIGINT, which each rank handles as Ctrl-C (an async save in
    flight commits, a save cut short removes its temp dir): a rank keeps SIGTERM's default,
    since the agent stops the ranks left after one failed with it, so a SIGTERM passed on as
    it came killed every rank mid-save and left `global_step_N.tmp/`, and SIGHUP, SIGQUIT
    and SIGUSR1 passed on as they came did the same. This process still ends as the
    signal's (`_signal_code`)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    signals = os.environ.get(SIGNALS_OPTION) or os.environ.get(
        SIGNALS_HANDLED, "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    )
    ours = {signal.Signals(number).name for number in STOP_SIGNALS}
    kept = [name for name in signals.split(",") if name.strip() and name.strip() not in ours]
    for variable in (SIGNALS_HANDLED, SIGNALS_OPTION):
        os.environ[variable] = ",".join(kept or [LEFT_TO_THE_AGENT])

    def stop(signum: int, _frame: Any) -> None:
        if _stopped_by:
            return
        _stopped_by.append(signum)
        sig = signal.Signals(signum)
        raise SignalException(f"Process {os.getpid()} got signal: {sig}", sigval=signal.SIGINT)

    if threading.current_thread() is threading.main_thread():
        always = (signal.SIGINT, signal.SIGTERM)
        others = tuple(number for number in STOP_SIGNALS if number not in always)
        for sig in (*always, *stop_signals.not_ignored(others)):
            signal.signal(sig, stop)


def _signal_code() -> int:
    """The exit code of a run a signal to this process stopped: 128 + its number (143 for
    SIGTERM), 130 for SIGINT or none noted."""
    first = _stopped_by[0] if _stopped_by else signal.SIGINT
    return EXIT_INTERRUPTED if first == signal.SIGINT else stop_signals.exit_code(first)


def main(argv: list[str]) -> int:
    """torchrun with `argv`, its per-run folder (each rank's error file, which is how a failed
    rank's message reaches `_run`) made here and removed afterwards: torchrun left an empty
    /tmp/torchelastic_* folder behind every run."""
    with _quiet_native_logs():
        from torch.distributed.run import parse_args, run
    _quiet_agent_logs()
    _quiet_timer_finalizer()
    _stop_once()
    os.environ[TORCHRUN_PID] = str(os.getpid())  # the ranks inherit it (`die_with_torchrun`)
    log_dir = tempfile.mkdtemp(prefix="mfsdp_torchrun_")
    if RESULT_SAID not in os.environ:  # the launching mfsdp's is kept: it tells both
        expect_result(log_dir)  # rank 0 leaves a file there once it printed the run's result
    os.environ[INTERRUPTED_RANKS] = os.path.join(log_dir, "interrupted")  # and a SIGINT's mark
    os.mkdir(os.environ[INTERRUPTED_RANKS])
    try:
        args = parse_args(["--log-dir", log_dir, *argv])
        taken = _endpoint_taken(args)
        if taken is not None:
            return _say_error(taken, EXIT_FAILED, "--json" in argv)
        _say_waiting(args, argv)
        code = _run(run, args, argv)
        hold_signals(code)  # decided: a late signal must not cut the exit with a traceback
        return code
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


def _run(run: Callable[[Any], Any], args: Any, argv: list[str]) -> int:
    """torchrun's `run(args)`, its failures reported in mfsdp's way (the module's docstring)."""
    from torch.distributed import DistError
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    try:
        run(args)
    except ChildFailedError as err:
        if result_said():  # a rank that failed after the result was printed fails nothing
            return 0
        interrupted = _interrupted_ranks()
        rank, failure = _deciding_failure(err.failures, interrupted)
        first_seen = next(iter(err.failures), None)
        stopped = _stopped_by_signal(rank, failure, first_seen, interrupted)
        if stopped is not None:
            code = EXIT_INTERRUPTED if stopped == INTERRUPTED else EXIT_FAILED
            return _say_stopped(f"rank {rank}: {stopped}", code, "--json" in argv)
        if failure.exitcode == EXIT_PEER_LOST and _max_nodes(args) > 1:
            _keep_the_store_up(args)
            lost = peer_said(failure.message.removeprefix(LOST_CONTACT))
            went = machine_went_away(f"rank {rank} lost contact with it: {lost}")
            return _say_stopped(went, EXIT_FAILED, "--json" in argv)
        code = rank_exit_code(failure.exitcode)
        if code == EXIT_CLOSED_PIPE:  # rank 0's stdout, the command's, has no reader left
            end_on_closed_stdout()
        unsaid = _unsaid(failure, err.failures)
        if unsaid is not None:
            print(
                f"error: {printable(_named(rank, failure, unsaid, err.failures))}", file=sys.stderr
            )
        rank_0 = err.failures.get(0)
        if "--json" in argv and not (rank_0 and _said(rank_0)):
            error = _named(
                rank, failure, failure.message if unsaid is None else unsaid, err.failures
            )
            print(json_text({"error": printable(error, lookalikes=False), "exit_code": code}))
        _keep_the_store_up(args)  # while `err` holds the agent, and with it its store
        return code
    except (KeyboardInterrupt, SignalException):
        return 0 if result_said() else _signal_code()  # the ranks have stopped by now
    except (RendezvousError, DistError) as err:  # the agent's rendezvous, or its store
        if result_said():
            return 0
        if not args.standalone and _ranks_started(args.log_dir):  # a machine left mid-run
            return _say_stopped(_store_lost(args, err), EXIT_FAILED, "--json" in argv)
        return _say_error(_rendezvous_failed(args, err), EXIT_FAILED, "--json" in argv)
    return 0


def _ranks_started(log_dir: str) -> bool:
    """Whether torch's agent started this machine's ranks: it makes their folder in `log_dir`
    (`attempt_N`) once the rendezvous has formed, before it starts them. A store lost after
    that is no port taken nor a machine that never came: the run had met, and trained."""
    return any(
        entry.name.startswith("attempt_")
        for run in _folders(log_dir)
        for entry in _folders(run.path)
    )


def _folders(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as entries:
            return [entry for entry in entries if entry.is_dir()]
    except OSError:
        return []


def _store_lost(args: Any, err: BaseException) -> str:
    """What stopped the ranks when the rendezvous store failed once they ran (`err`): the
    machine that hosts it, or one whose leaving closed it, went away."""
    return machine_went_away(
        f"the rendezvous store at --rdzv-endpoint {args.rdzv_endpoint} stopped answering:"
        f" {cut_to(peer_said(_first_cause_line(err)), 160)}"
    )


def _first_cause_line(err: BaseException) -> str:
    """The first line of what `err`'s innermost cause said (torch's RendezvousError says only
    "see inner exception"), or its type's name."""
    cause = err
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]


def _keep_the_store_up(args: Any) -> None:
    """Wait OTHER_MACHINES_GRACE_S before a machine of a run of several ends on its ranks'
    failure: its torchrun may host the rendezvous store, and the other machines' torchrun,
    whose ranks end a moment later (an error every rank meets alike: `ALIKE_EXIT_DELAY_S`),
    lost it before they saw their ranks end, and blamed the port instead of saying why."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    if _max_nodes(args) > 1:
        with contextlib.suppress(KeyboardInterrupt, SignalException):
            time.sleep(OTHER_MACHINES_GRACE_S)


def _max_nodes(args: Any) -> int:
    """The most machines torchrun's `--nnodes` (N or MIN:MAX) lets into the run."""
    from torch.distributed.run import parse_min_max_nnodes

    return int(parse_min_max_nnodes(args.nnodes)[1])


def _endpoint_taken(args: Any) -> str | None:
    """The line refusing a run given a c10d `--rdzv-endpoint` whose port something on this
    machine already holds, where this machine hosts the rendezvous store there; None
    otherwise. A one-machine run (`--nnodes 1`) hosts it (`cli.launch.torchrun_command`:
    `is_host=true`, whatever address of this machine the endpoint names); torch, failing to,
    joined whatever listened there as a client instead: another run's store (this run then
    waited, silent, for that whole run, to end in a traceback) or another program (a
    traceback after a minute or more). `--node-rank 0` of several, its endpoint an address of
    this machine, is to host it too: another program there left it waiting past its join
    timeout without a word, a SIGTERM acting only after a minute. The other nodes of its own
    run started on this machine may hold it (how a run across machines is tried out on one:
    `_held_by_this_run`); a node whose endpoint is another machine's joins it as a client."""
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    from cli.own_address import names_this_machine

    if args.standalone or args.rdzv_backend != "c10d":
        return None
    try:
        host, port = parse_rendezvous_endpoint(args.rdzv_endpoint, default_port=29400)
    except ValueError:
        return None
    one_machine = _max_nodes(args) == 1
    if not one_machine and not (args.node_rank == 0 and names_this_machine(host)):
        return None
    if _port_free(port):
        return None
    ss = f"`ss -ltnp 'sport = :{port}'` names it"
    if one_machine:
        return (
            f"--rdzv-endpoint {args.rdzv_endpoint}: port {port} is in use on this machine"
            f" (another run's rendezvous, or another program: {ss}); a one-machine run hosts"
            " its rendezvous there itself: pick a free port, or leave --rdzv-endpoint out (one"
            " machine needs none)"
        )
    if _held_by_this_run(port, args.rdzv_id):
        return None
    return (
        f"--rdzv-endpoint {args.rdzv_endpoint} (--rdzv-id {args.rdzv_id}): port {port} is in"
        f" use on this machine by another program or run ({ss}); --node-rank 0 hosts the"
        " run's rendezvous there: pick a free port, the same in every machine's"
        " --rdzv-endpoint"
    )


def _held_by_this_run(port: int, rdzv_id: str) -> bool:
    """Whether `port` is held by a torchrun of this run (`--rdzv-id rdzv_id`) on this machine,
    or /proc cannot say who holds it (torch is left to it then)."""
    from cli.port_holders import listeners

    held_by = listeners(port)
    if held_by is None:
        return True
    ours = (f"--rdzv-id={rdzv_id}", f"--rdzv_id={rdzv_id}")
    for command in held_by:
        words = command.decode(errors="replace").split("\0")
        if any(word in ours for word in words) or ("--rdzv-id", rdzv_id) in pairwise(words):
            return True
    return False


def _port_free(port: int) -> bool:
    """Whether a listening socket could be opened on `port` of every address of this machine,
    as torch's rendezvous store opens it (SO_REUSEADDR: a port left by a closed connection
    counts as free)."""
    import socket

    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 here
            continue
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError:
                return False
    return True


def _say_waiting(args: Any, argv: list[str]) -> None:
    """One line as a run of several machines waits at its rendezvous: torchrun waits for them
    (up to its join timeout, 10 minutes) without a word."""
    if args.standalone or _max_nodes(args) < 2:
        return
    from trainer.node_rank import given_node_rank

    command = argv[argv.index("cli.train") + 1] if "cli.train" in argv[:-1] else "mfsdp"
    node = given_node_rank()
    this = "" if node is None else f"--node-rank {node} "
    print(
        f"[{command}] {this}waiting for the run's {_max_nodes(args)} machines at --rdzv-endpoint"
        f" {args.rdzv_endpoint} (--rdzv-id {args.rdzv_id}) ...",
        file=sys.stderr,
        flush=True,
    )


def _rendezvous_failed(args: Any, err: BaseException) -> str:
    """The line for torchrun's rendezvous failing (`err`: torch's RendezvousError or store
    error, whose own text says only "see inner exception"): where, what went wrong, what to
    do."""
    from torch.distributed.elastic.rendezvous.api import (
        RendezvousClosedError,
        RendezvousTimeoutError,
    )

    said = _first_cause_line(err)
    if args.standalone:
        return f"torchrun's rendezvous on this machine failed ({cut_to(said, 160)})"
    where = f"--rdzv-endpoint {args.rdzv_endpoint} (--rdzv-id {args.rdzv_id})"
    if isinstance(err, RendezvousTimeoutError):
        return (
            f"{where}: not all {_max_nodes(args)} machines joined in time: start the same"
            " command on each, with the same --nnodes, --rdzv-endpoint and --rdzv-id and its"
            " own --node-rank"
        )
    if isinstance(err, RendezvousClosedError):
        return (
            f"{where}: that rendezvous is closed (a run of that id ended): give this run its"
            " own --rdzv-id"
        )
    return (
        f"{where}: the rendezvous store there failed or did not answer ({cut_to(said, 160)}): is"
        " another run or program using that port? pick another port; across machines, check"
        " that the first machine's run is up and its address reachable"
    )


def _interrupted_ranks() -> frozenset[int]:
    """The ranks that left their number in INTERRUPTED_RANKS: each got a SIGINT of its own."""
    try:
        names = os.listdir(os.environ[INTERRUPTED_RANKS])
    except (KeyError, OSError):
        return frozenset()
    return frozenset(int(name) for name in names if name.isdigit())


def _say_stopped(stopped: str, code: int, as_json: bool) -> int:
    """End the run a signal stopped (`stopped`: `rank 1: killed by SIGKILL ...`) with `code`
    (130 for an interrupt, else 1: the run failed). The launching mfsdp is told in the file
    it named (`STOPPED_BY`), and says it with the step reached and the checkpoint the next
    run resumes from, which it knows; this process says it alone when none is named."""
    told = os.environ.get(STOPPED_BY)
    if told:
        with contextlib.suppress(OSError), open(told, "w", encoding="utf-8") as handle:
            handle.write(stopped)
            return code
    return _say_error(stopped, code, as_json)


def _say_error(line: str, code: int, as_json: bool) -> int:
    """Say `line` as this command's `error:` line (and, with --json, its failure object on
    stdout) and return `code`, for what no rank said."""
    print(f"error: {printable(line)}", file=sys.stderr)
    if as_json:
        print(json_text({"error": printable(line, lookalikes=False), "exit_code": code}))
    return code


if __name__ == "__main__":
    ensure_standard_streams()  # the ranks inherit its 0, 1 and 2: none closed, none a file
    guard_stderr()  # it writes to the launching mfsdp's stderr: best effort, as the ranks do
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # while torch loads, before `run` takes over: the launching
        sys.exit(EXIT_INTERRUPTED)  # mfsdp says "interrupted", not a traceback from here
