"""How many CPU threads each training process gives torch, chosen before torch starts.

torch's default is one intra-op thread per core of the machine, for every process. With
several ranks on one machine, or other jobs keeping the cores busy, that oversubscribes the
cores, and OpenMP's workers spin while they wait for preempted peers (bench/threads.py's
busy rows show the cost). So `mfsdp train` picks the count itself, per process, from

- the cores this process may run on (`os.sched_getaffinity`), shared by the local ranks
  (`LOCAL_WORLD_SIZE`, or the `--nproc-per-node` about to be launched);
- how many of those cores are idle right now (a 0.1 s sample of /proc/stat), so a busy
  machine gets fewer threads. The model's size is not a rule: on an idle 2-core machine even
  the tiny model (hidden 128) steps faster on both cores (bench/threads.py);

and, where cores are busy, asks OpenMP to sleep, not spin, while it waits
(`OMP_WAIT_POLICY=PASSIVE`, the standard
switch: GNU's libgomp in torch's Linux wheels and Intel's runtime both read it; for Intel's
it means what `KMP_BLOCKTIME=0` does), so a worker that lost its core does not burn the
core the others need. Both are environment variables
OpenMP reads once when torch loads it, so they are set in this process before torch is
imported and inherited by the ranks torchrun starts. A user's `OMP_NUM_THREADS`,
`MKL_NUM_THREADS` (which torch reads over it) or `OMP_WAIT_POLICY` always wins.
`bench/threads.py` measures the choice against fixed counts on an idle and a busy machine
(docs/threads.md). The `ckpt` commands that load torch choose the same way, as one process:
`validate --deep` scans for NaN/Inf with torch ops piece by piece, where workers spinning on
busy cores cost as much as in training; `inspect` and `export-hf` choose once torch loads.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import logging
import os
import platform
import sys
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHOSEN_MARKER = (
    "MFSDP_THREADS_CHOSEN"  # set once chosen, so launched ranks neither re-choose nor re-log
)
SAMPLE_SECONDS = 0.1


USER_SET = "OMP_NUM_THREADS as set"  # the reason of a count the user chose
# torch sizes its intra-op pool by MKL_NUM_THREADS where it is set, over OMP_NUM_THREADS
# (intraop_default_num_threads, aten/src/ATen/ParallelCommon.cpp): a user's count too
MKL_VARIABLE = "MKL_NUM_THREADS"
MKL_USER_SET = f"{MKL_VARIABLE} as set"
# torchrun sets OMP_NUM_THREADS=1 for its ranks where it is unset and it starts more than one
# per machine (torch/distributed/run.py), so a 1 there may not be the user's
TORCHRUN_SET = "OMP_NUM_THREADS as set, by you or by torchrun"

# isspace() in the C locale: what libgomp's strtoul skips around a count
C_WHITESPACE = " \t\n\v\f\r"
# OpenMP counts threads in an int (omp_get_max_threads): libgomp reads counts up to LONG_MAX
# and then reports a negative number of threads.
MAX_THREAD_COUNT = 2**31 - 1


@dataclass(frozen=True)
class ThreadChoice:
    threads: int  # the count: OMP_NUM_THREADS's value, or a user's MKL_NUM_THREADS
    wait_policy: str | None  # None: left to the user's setting or OpenMP's default
    reason: str
    torch_threads: int  # what torch runs for `threads` (threads_torch_runs)
    user_set: bool = False

    def describe(self) -> str:
        policy = f", OMP_WAIT_POLICY={self.wait_policy}" if self.wait_policy else ""
        capped = (
            f", {self.threads} asked: torch runs at most one per physical core"
            if self.torch_threads < self.threads
            else ""
        )
        return f"{self.torch_threads} CPU thread(s) per process ({self.reason}{capped}{policy})"


def choose_threads(
    local_ranks: int,
    idle_cores: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> ThreadChoice:
    """The thread count and wait policy for one of `local_ranks` processes on this machine.

    `idle_cores` None samples /proc/stat.
    """
    environ = os.environ if environ is None else environ
    mkl_user = thread_count_setting(environ.get(MKL_VARIABLE, ""))
    if mkl_user is not None:  # torch's intra-op count: MKL_NUM_THREADS over OMP_NUM_THREADS
        torch_runs = threads_torch_runs(mkl_user, environ)
        return ThreadChoice(mkl_user, None, MKL_USER_SET, torch_runs, user_set=True)
    user = thread_count_setting(environ.get("OMP_NUM_THREADS", ""))
    if user is not None:
        reason = TORCHRUN_SET if user == 1 and _under_torchrun(local_ranks, environ) else USER_SET
        return ThreadChoice(user, None, reason, threads_torch_runs(user, environ), user_set=True)
    cores = available_cores()
    ranks = max(1, local_ranks)
    share = max(1, len(cores) // ranks)
    idle = idle_cores_now(cores) if idle_cores is None else idle_cores
    # A quarter core of slack: background noise on an idle machine must not cost a thread.
    free_share = max(1, int(idle / ranks + 0.25))
    threads = min(share, free_share)
    busy = f", {len(cores) - idle:.1f} busy" if threads < share else ""
    # Sleeping waiters only pay where cores are contended: on an idle machine the wake-up
    # latency makes small ops slower (bench/threads.py, idle rows).
    policy = "PASSIVE" if threads < share and "OMP_WAIT_POLICY" not in environ else None
    reason = f"{len(cores)} core(s){busy}, {ranks} local rank(s)"
    return ThreadChoice(threads, policy, reason, threads_torch_runs(threads, environ))


def thread_count_setting(value: str) -> int | None:
    """The thread count an OMP_NUM_THREADS value sets ("4"; "4,2" is OpenMP's per-level list,
    whose first count is this process's), or None where OpenMP rejects it ("0", "abc", "-1",
    "2,") or mfsdp does (a count past MAX_THREAD_COUNT)."""
    counts = [_openmp_count(part) for part in value.split(",")]
    if any(count is None or count > MAX_THREAD_COUNT for count in counts):
        return None
    return counts[0]


def _openmp_count(text: str) -> int | None:
    """One count of an OMP_NUM_THREADS list as libgomp reads it (parse_unsigned_long_list in
    libgomp/env.c, by strtoul in base 10), or None where libgomp warns and ignores the
    variable: C whitespace around it and one leading "+" are allowed ("+1" runs 1 thread), and
    only ASCII digits ("²" and "٣" are digits to Python, not to strtoul). Zero is no count."""
    number = text.strip(C_WHITESPACE)
    digits = number[1:] if number.startswith("+") else number
    if not (digits.isascii() and digits.isdigit()) or int(digits) == 0:
        return None
    return int(digits)


def threads_torch_runs(requested: int, environ: Mapping[str, str] | None = None) -> int:
    """The intra-op threads torch runs for OMP_NUM_THREADS=`requested`. Built with MKL (its
    x86-64 wheels), torch sizes OpenMP's pool by `mkl_get_max_threads()` (`init_num_threads`
    in aten/src/ATen/ParallelOpenMP.cpp), and MKL, unless MKL_DYNAMIC=FALSE, runs no more
    threads than the machine has physical cores, whatever this process's affinity: on 2 cores
    OMP_NUM_THREADS=64 runs 2 threads. Without MKL, torch runs the count asked for."""
    environ = os.environ if environ is None else environ
    mkl_caps = environ.get("MKL_DYNAMIC", "").strip().upper() != "FALSE"
    if not torch_has_mkl() or not mkl_caps:
        return requested
    return min(requested, physical_cores())


def torch_has_mkl() -> bool:
    """Whether torch is built with MKL: asked of torch where it is imported already (a
    source build, or an x86-64 wheel without MKL, is not its machine's usual wheel); else
    told from the machine, as torch's wheels are built (MKL on x86-64 only), importing no
    torch before its thread count is chosen."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return bool(torch.backends.mkl.is_available())
    return platform.machine().lower() in ("x86_64", "amd64")


def physical_cores() -> int:
    """The machine's physical cores (a core's hyper-threads counted once), all of them: MKL
    counts these, not the CPUs this process may run on."""
    cores = set()
    for topology in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
        try:
            package = (topology / "physical_package_id").read_text().strip()
            cores.add((package, (topology / "core_id").read_text().strip()))
        except OSError:  # a CPU taken offline while read
            continue
    return len(cores) or os.cpu_count() or 1


def drop_malformed_thread_count(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Remove an OMP_NUM_THREADS that is not a thread count, before torch loads OpenMP, and
    say so (None when there was nothing to drop). OpenMP would print
    `libgomp: Invalid value for environment variable OMP_NUM_THREADS` from every process that
    loads torch, the launcher and each rank, and then run its default anyway."""
    environ = os.environ if environ is None else environ
    value = environ.get("OMP_NUM_THREADS")
    if value is None or thread_count_setting(value) is not None:
        return None
    del environ["OMP_NUM_THREADS"]
    if not value.strip(C_WHITESPACE):  # `OMP_NUM_THREADS=`: unset in all but name
        return None
    if all(_openmp_count(part) for part in value.split(",")):
        return (
            f"OMP_NUM_THREADS={value!r} is more threads than OpenMP counts"
            f" (at most {MAX_THREAD_COUNT}); ignored"
        )
    return f"OMP_NUM_THREADS={value!r} is not a positive whole number; ignored"


def configure_threads(
    local_ranks: int, ranks_option: str = "--nproc-per-node"
) -> ThreadChoice | None:
    """Choose once per job, before torch loads OpenMP: set the environment this process and the
    ranks it launches inherit, log the choice once (INFO). None when already chosen upstream.
    `ranks_option`: the option of the command that set `local_ranks` (`mfsdp demo --nproc`)."""
    if os.environ.get(CHOSEN_MARKER):
        return None
    choice = choose_threads(local_ranks)
    if not choice.user_set:  # a user's value stays as written ("4,2": a count per level)
        os.environ["OMP_NUM_THREADS"] = str(choice.threads)
        if "torch" in sys.modules:  # imported already (a notebook, a test): the count applies
            sys.modules["torch"].set_num_threads(choice.torch_threads)
    if choice.wait_policy:
        os.environ["OMP_WAIT_POLICY"] = choice.wait_policy
    os.environ[CHOSEN_MARKER] = "1"
    # under a user's own torchrun: one line per machine, from its local rank 0; a LOCAL_RANK
    # left in the launching shell (no RANK beside it) hid the line and the note
    if os.environ.get("LOCAL_RANK", "0") == "0" or "RANK" not in os.environ:
        # INFO (`mfsdp -v`): an error a run stops with stays the only line it prints
        logger = logging.getLogger("mfsdp.threads")
        advice = (
            how_to_let_mfsdp_choose(local_ranks)
            if choice.user_set
            else "set OMP_NUM_THREADS to override"
        )
        logger.info("%s; %s", choice.describe(), advice)
        crowded = oversubscribed(local_ranks, ranks_option) or (
            threads_oversubscribed(choice.threads, local_ranks, choice.torch_threads)
            if choice.user_set
            else None
        )
        if crowded:
            logger.warning("note: %s", crowded)
    return choice


class _ChooseBeforeTorch(importlib.abc.MetaPathFinder):
    """Chooses the thread count just before torch is first imported, then leaves the
    import to the finders that load it."""

    def __init__(self, local_ranks: int):
        self.local_ranks = local_ranks

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname == "torch":
            with contextlib.suppress(ValueError):  # removed already, by a nested import
                sys.meta_path.remove(self)
            configure_threads(self.local_ranks)
        return None


def configure_threads_when_torch_loads(local_ranks: int = 1) -> None:
    """`configure_threads(local_ranks)` once torch is imported, just before, for a command
    that loads torch only for some inputs (`ckpt inspect` reading pickled objects, `ckpt
    export-hf` converting a dtype): one that loads none makes no choice, and so no 0.1 s CPU
    sample. Now where torch is imported already."""
    if "torch" in sys.modules:
        configure_threads(local_ranks)
        return
    if not any(isinstance(finder, _ChooseBeforeTorch) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ChooseBeforeTorch(local_ranks))


def threads_oversubscribed(
    threads: int,
    local_ranks: int,
    torch_threads: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """Why a user's thread count is slow here, or None: more threads in all than cores
    take turns on a core (8 threads on 2 cores was said to be "as set", without a word).
    `torch_threads`: what torch runs of `threads` (threads_torch_runs), where that is fewer:
    OMP_NUM_THREADS=64 on 2 cores was said to be 64 threads where torch ran 2. The count is
    named by the variable it came from (`users_thread_variable`)."""
    environ = os.environ if environ is None else environ
    runs = threads if torch_threads is None else torch_threads
    cores = len(available_cores())
    ranks = max(1, local_ranks)
    if runs * ranks <= cores:
        return None
    capped = f" (torch runs {runs}, the machine's physical cores)" if runs < threads else ""
    return (
        f"{users_thread_variable(environ)}={threads}{capped} x {ranks} process(es) ="
        f" {runs * ranks} threads on {cores} CPU core(s): threads take turns on a core;"
        f" {how_to_let_mfsdp_choose(local_ranks, environ)}"
    )


def users_thread_variable(environ: Mapping[str, str]) -> str:
    """The variable a user's thread count is read from: MKL_NUM_THREADS where it holds a
    count, as torch reads it over OMP_NUM_THREADS (`choose_threads`), else OMP_NUM_THREADS."""
    if thread_count_setting(environ.get(MKL_VARIABLE, "")) is not None:
        return MKL_VARIABLE
    return "OMP_NUM_THREADS"


def how_to_let_mfsdp_choose(local_ranks: int, environ: Mapping[str, str] | None = None) -> str:
    """What a user with OMP_NUM_THREADS or MKL_NUM_THREADS set does to let mfsdp choose.
    Under their own torchrun with several ranks per machine, unsetting it only brings back
    torchrun's 1."""
    environ = os.environ if environ is None else environ
    if users_thread_variable(environ) == MKL_VARIABLE:
        return f"unset {MKL_VARIABLE} (which torch reads over OMP_NUM_THREADS) to let mfsdp choose"
    if _under_torchrun(local_ranks, environ):
        return (
            "torchrun sets OMP_NUM_THREADS=1 where it is unset; `mfsdp train --nproc-per-node`"
            " launches the ranks with mfsdp's choice"
        )
    return "unset OMP_NUM_THREADS to let mfsdp choose"


def _under_torchrun(local_ranks: int, environ: Mapping[str, str]) -> bool:
    """Whether this is a rank of a user's own torchrun that sets OMP_NUM_THREADS=1 where it is
    unset (several ranks per machine). Ranks `mfsdp train` launches never choose again."""
    return "TORCHELASTIC_RUN_ID" in environ and local_ranks > 1


# The most ranks `mfsdp train` starts on a CPU machine (trainer/local_ranks.py refuses more):
# ranks past the cores only take turns on them, yet a few per core still try a run's
# multi-rank code on a laptop; `mfsdp demo --nproc` stops at the floor, 8.
MAX_RANKS_PER_CORE = 4
MIN_CPU_RANK_CAP = 8
CPU_RANKS_RULE = f"{MAX_RANKS_PER_CORE} per core or {MIN_CPU_RANK_CAP}, whichever is more"


def cpu_rank_cap(cores: int) -> int:
    """The most local ranks a CPU machine with `cores` cores runs (CPU_RANKS_RULE)."""
    return max(MAX_RANKS_PER_CORE * cores, MIN_CPU_RANK_CAP)


def oversubscribed(local_ranks: int, ranks_option: str = "--nproc-per-node") -> str | None:
    """Why `local_ranks` processes on this machine's cores will be slow, or None: more ranks
    than cores take turns on a core, and a step's collectives wait on whichever rank is
    preempted. Training on CPU (FSDP2) pays it on every op; on GPUs, the host-side work
    (kernel launches, data loading) does."""
    cores = len(available_cores())
    if local_ranks <= cores:
        return None
    return (
        f"{local_ranks} local ranks on {cores} CPU core(s): ranks take turns on a core, and "
        f"every step waits on the one preempted (on CPU, {ranks_option} {cores} or fewer "
        "runs faster)"
    )


def available_cores() -> list[int]:
    """The CPUs this process may run on (a cgroup or `taskset` may allow fewer than exist)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def idle_cores_now(cores: list[int], seconds: float = SAMPLE_SECONDS) -> float:
    """How many of `cores` sat idle over a short sample (all of them where /proc/stat is absent)."""
    before = _cpu_times()
    if not before:
        return float(len(cores))
    time.sleep(seconds)
    after = _cpu_times()
    idle = 0.0
    for core in cores:
        if core not in before or core not in after:
            idle += 1.0
            continue
        total = sum(after[core]) - sum(before[core])
        waiting = (after[core][3] + after[core][4]) - (before[core][3] + before[core][4])
        idle += waiting / total if total > 0 else 1.0
    return idle


def _cpu_times() -> dict[int, list[int]]:
    """Per-CPU jiffies from /proc/stat: user nice system idle iowait irq softirq steal."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return {}
    times = {}
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            times[int(name[3:])] = [int(value) for value in fields[:8]]
    return times
