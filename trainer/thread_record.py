"""The CPU threads a run's processes compute with: recorded in every step it saves, and
compared when a CPU run resumes one.

With dropout on, a step on CPU computes other values at another intra-op thread count
(a resume at 1 thread of a step trained at 2 differed from the
uninterrupted run from its first resumed step on), and unless OMP_NUM_THREADS is set mfsdp
picks that count at every launch from how busy the machine is (`trainer.threads`), so one
command resumed an hour later could run another count without a word. Each step's manifest
therefore records torch's count in every process, by rank (`info.cpu_threads`), and a CPU
run resuming a step recorded at other counts says so once, with the setting that gives
the step's threads again. How the count is chosen is unchanged.

Not compared: a run on GPUs (its steps compute on the GPU), a resume on another number of
ranks (bit for bit is promised on the same number only), a step saved before the count
was recorded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from mfsdp_ckpt.format.layout import CheckpointPaths
from trainer.resume import manifest_of
from trainer.threads import users_thread_variable

THREADS_INFO_KEY = "cpu_threads"  # manifest info: torch's intra-op threads, one per rank


def threads_of_every_rank(device: torch.device) -> list[int]:
    """torch's intra-op thread count in each process of the run, by rank: one collective,
    so every rank must call it (the launcher chooses for its machine, so the machines of a
    run on several may differ)."""
    mine = torch.tensor([torch.get_num_threads()], dtype=torch.int64, device=device)
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [int(mine.item())]
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [int(count.item()) for count in every]


def thread_change_warning(
    found: CheckpointPaths, now: Sequence[int], device: torch.device
) -> str | None:
    """One line when a CPU run (`device`) resumes the checkpoint `found` at other thread
    counts (`now`, by rank: `threads_of_every_rank`) than its manifest records; None where
    they agree or are not compared (the module's docstring)."""
    if device.type != "cpu":
        return None
    manifest = manifest_of(found)
    then = recorded_threads(manifest.info) if manifest is not None else None
    if manifest is None or then is None or len(then) != len(now) or then == list(now):
        return None
    variable = users_thread_variable(os.environ)  # the one torch reads, where both are set
    remedy = (
        f"{variable}={then[0]} gives the step's threads again"
        if len(set(then)) == 1
        else f"{variable} set on each machine to the count its ranks recorded gives them again"
    )
    return (
        f"warning: {found.manifest}: step {manifest.step} was trained with"
        f" {_per_process(then)} CPU thread(s) per process, this run has {_per_process(now)}:"
        " resumed steps match an uninterrupted run bit for bit only at the same thread count"
        " (CPU results with dropout depend on it; the count is the one set, else mfsdp's"
        f" choice from the machine's load); {remedy}"
    )


def recorded_threads(info: dict[str, Any]) -> list[int] | None:
    """The counts a manifest's info records (`THREADS_INFO_KEY`), or None where it records
    none: a step saved before they were recorded, or a value that is no list of counts."""
    counts = info.get(THREADS_INFO_KEY)
    if not isinstance(counts, list) or not counts:
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in counts):
        return None
    return counts


def _per_process(counts: Sequence[int]) -> str:
    """`2` where every rank has the same count, else each rank's: `2, 2, 1, 1 (by rank)`."""
    if len(set(counts)) == 1:
        return str(counts[0])
    return f"{', '.join(map(str, counts))} (by rank)"
