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
imported and inherited by the ranks torchrun starts. A user's `OMP_NUM_THREADS` or
`OMP_WAIT_POLICY` always wins. `bench/threads.py` measures the choice against fixed counts
on an idle and a busy machine (docs/threads.md).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

CHOSEN_MARKER = (
    "MFSDP_THREADS_CHOSEN"  # set once chosen, so launched ranks neither re-choose nor re-log
)
SAMPLE_SECONDS = 0.1


USER_SET = "OMP_NUM_THREADS as set"  # the reason of a count the user chose


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    wait_policy: str | None  # None: left to the user's setting or OpenMP's default
    reason: str

    def describe(self) -> str:
        policy = f", OMP_WAIT_POLICY={self.wait_policy}" if self.wait_policy else ""
        return f"{self.threads} CPU thread(s) per process ({self.reason}{policy})"


def choose_threads(
    local_ranks: int,
    idle_cores: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> ThreadChoice:
    """The thread count and wait policy for one of `local_ranks` processes on this machine.

    `idle_cores` None samples /proc/stat.
    """
    environ = os.environ if environ is None else environ
    user = thread_count_setting(environ.get("OMP_NUM_THREADS", ""))
    if user is not None:
        return ThreadChoice(user, None, USER_SET)
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
    return ThreadChoice(threads, policy, f"{len(cores)} core(s){busy}, {ranks} local rank(s)")


def thread_count_setting(value: str) -> int | None:
    """The thread count an OMP_NUM_THREADS value sets ("4"; "4,2" is OpenMP's per-level list,
    whose first count is this process's), or None where OpenMP rejects it ("0", "abc", "-1")."""
    counts = [part.strip() for part in value.split(",")]
    if all(count.isdigit() and int(count) > 0 for count in counts):
        return int(counts[0])
    return None


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
    if not value.strip():  # `OMP_NUM_THREADS=`: unset in all but name
        return None
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
    os.environ["OMP_NUM_THREADS"] = str(choice.threads)
    if choice.wait_policy:
        os.environ["OMP_WAIT_POLICY"] = choice.wait_policy
    os.environ[CHOSEN_MARKER] = "1"
    if "torch" in sys.modules:  # imported already (a notebook, a test): the count still applies
        sys.modules["torch"].set_num_threads(choice.threads)
    if (
        os.environ.get("LOCAL_RANK", "0") == "0"
    ):  # under a user's own torchrun: one line per machine
        # INFO (`mfsdp -v`): an error a run stops with stays the only line it prints
        logger = logging.getLogger("mfsdp.threads")
        user_set = choice.reason == USER_SET
        how = "unset" if user_set else "set"
        verb = "to let mfsdp choose" if user_set else "to override"
        logger.info("%s; %s OMP_NUM_THREADS %s", choice.describe(), how, verb)
        crowded = oversubscribed(local_ranks, ranks_option) or (
            threads_oversubscribed(choice.threads, local_ranks) if user_set else None
        )
        if crowded:
            logger.warning("note: %s", crowded)
    return choice


def threads_oversubscribed(threads: int, local_ranks: int) -> str | None:
    """Why a user's OMP_NUM_THREADS is slow here, or None: more threads in all than cores
    take turns on a core (8 threads on 2 cores was said to be "as set", without a word)."""
    cores = len(available_cores())
    total = threads * max(1, local_ranks)
    if total <= cores:
        return None
    return (
        f"OMP_NUM_THREADS={threads} x {max(1, local_ranks)} process(es) = {total} threads on"
        f" {cores} CPU core(s): threads take turns on a core; unset OMP_NUM_THREADS to let"
        " mfsdp choose"
    )


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
