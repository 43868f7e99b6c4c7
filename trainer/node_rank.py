"""Which machine of a `--nnodes` run a rank runs on, by the `--node-rank` the user gave it.

torchrun's c10d rendezvous ignores `--node-rank` and numbers the machines in the order they
join, so a rank's RANK or GROUP_RANK names no machine the user launched: a line saying
"rank(s) 2-3" sent the user to the wrong machine whenever the second one joined first.
`mfsdp train` hands the `--node-rank` it was given to its ranks (NODE_RANK), and a line about
one machine of the run names it by that and its host name (`machine_names`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from mfsdp_ckpt.storage.gathered_files import rank_ranges

NODE_RANK = "MFSDP_NODE_RANK"


def pass_node_rank(node_rank: int | None) -> None:
    """Hand `node_rank` (this machine's `--node-rank`) to the ranks this process launches;
    None clears it, so that one exported in a shell, or inherited from another run, never
    names this machine."""
    if node_rank is None:
        os.environ.pop(NODE_RANK, None)
    else:
        os.environ[NODE_RANK] = str(node_rank)


def given_node_rank() -> int | None:
    """The `--node-rank` given to the `mfsdp train` that launched this rank; None when none
    was (torchrun started directly, or no `--node-rank` given)."""
    value = os.environ.get(NODE_RANK, "")
    return int(value) if value.isdigit() else None


def machine_names(ranks: Sequence[int], machines: Sequence[tuple[int | None, str]]) -> str:
    """`machine --node-rank 1 (host h2)` for the machines `ranks` run on (`machines`, by
    rank: its `given_node_rank()` and host name); a machine without one is named by its host
    and its ranks: `machine on host h2 (rank(s) 2-3)`. Several: `machines --node-rank 0
    (host h1), --node-rank 2 (host h3)`."""
    held: dict[tuple[int | None, str], list[int]] = {}
    for rank in ranks:
        held.setdefault(machines[rank], []).append(rank)
    names = [
        f"on host {host} (rank(s) {rank_ranges(of)})"
        if node is None
        else f"--node-rank {node} (host {host})"
        for (node, host), of in held.items()
    ]
    return ("machine " if len(names) == 1 else "machines ") + ", ".join(names)
