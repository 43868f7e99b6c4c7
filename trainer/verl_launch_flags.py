"""How many processes a converted verl run starts, as the `mfsdp train` flags that start
them (`--nproc-per-node 8`, `--nnodes 2`, ...), for the command line `mfsdp config
from-verl` writes at the top of the config: from the torchrun command that starts verl's
SFT trainer (`trainer.torchrun_options`), or from the GRPO run's trainer.n_gpus_per_node and
trainer.nnodes (verl's Ray trainer places its workers by them, whatever starts it).

Left out, the header's command started one process where verl ran eight, and the global
batch kept made the run eight times slower, without a word. A count known only when the
script runs (`--nproc-per-node=$1`, `${NGPUS}` unset, `gpu`) is never guessed: the command
holds a placeholder (`--nproc-per-node N`, which `mfsdp train` refuses, so a copy of it never
starts one process where verl ran several), and a note says where it comes from. The
config itself is whole without it (a count is no key of it): the conversion's exit status
stays what its keys make it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainer.torchrun_options import Option, Torchrun

# what stands in the command for a value known only when the script runs
_PLACEHOLDERS = {
    "--nproc-per-node": "N",
    "--nnodes": "NODES",
    "--rdzv-endpoint": "HOST:PORT",
}
_COUNT = re.compile(r"[0-9]+")
_TORCHRUN_DEFAULT_PORT = "29500"  # torch/distributed/run.py: master_port's default
_RAY_KEYS = {"trainer.n_gpus_per_node": "--nproc-per-node", "trainer.nnodes": "--nnodes"}


@dataclass
class LaunchFlags:
    """The `mfsdp train` flags a converted run starts with, in order (a flag, then its value
    or placeholder), and notes on where each comes from."""

    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, flag: str, value: str | None, source: str, why: str = "") -> None:
        """`flag value`, from `source`; a value None is not known here (`source` is `why`):
        its placeholder stands in the command (which `mfsdp train` refuses), with a note."""
        if value is None:
            placeholder = _PLACEHOLDERS[flag]
            self.flags += [flag, placeholder]
            self.notes.append(
                f"{flag} {placeholder} in the command above: {source} is {why}: write the value"
            )
        else:
            self.flags += [flag, value]


def torchrun_flags(torchrun: Torchrun) -> LaunchFlags:
    """The flags that start the processes `torchrun` (the script's command) starts: one per
    GPU of each machine (`--nproc-per-node`, `--nnodes`) and, on several machines, where
    they meet (`--rdzv-endpoint`, from torchrun's or its `--master-addr`/`--master-port`),
    which machine this is (`--node-rank`) and the run's id (`--rdzv-id`)."""
    launch = LaunchFlags()
    shown = " ".join(option.shown for option in torchrun.options if option.dest != "module")
    if torchrun.unread is not None:
        word, why = torchrun.unread
        launch.add(
            "--nproc-per-node",
            None,
            f"torchrun's {word}",
            f"{why}, so the processes torchrun starts are not known here",
        )
        return launch
    _count(launch, torchrun.given("nproc_per_node"), "--nproc-per-node", _per_node)
    nodes = _count(launch, torchrun.given("nnodes"), "--nnodes", _node_count)
    read = {"nproc_per_node", "nnodes", "module", "standalone"}
    if nodes != "1" and torchrun.given("standalone") is None:
        read |= _meeting(launch, torchrun)
    others = [option.shown for option in torchrun.options if option.dest not in read]
    if launch.flags:
        launch.notes.insert(0, f"torchrun {shown}: {' '.join(launch.flags)} in the command above")
    if others:
        launch.notes.append(
            f"torchrun {' '.join(others)}: not passed on; mfsdp train starts torchrun with"
            " settings of its own"
        )
    return launch


def ray_flags(pairs: list[tuple[str, Any]]) -> LaunchFlags | None:
    """The flags for a GRPO run's trainer.n_gpus_per_node and trainer.nnodes (`pairs`: the
    source's verl keys), the GPUs verl's Ray trainer runs on; None where it sets neither."""
    given = {key: value for key, value in pairs if key in _RAY_KEYS}
    if not given:
        return None
    launch = LaunchFlags()
    for key, flag in _RAY_KEYS.items():
        if key not in given:
            continue
        text = str(given[key]).strip()
        if not _COUNT.fullmatch(text):
            launch.add(flag, None, f"{key}={text}", "no count known here")
        elif int(text) != 1:
            launch.add(flag, text, key)
    if launch.flags:
        keys = ", ".join(f"{key}={given[key]}" for key in _RAY_KEYS if key in given)
        launch.notes.insert(0, f"{keys}: {' '.join(launch.flags)} in the command above")
    return launch


def _count(
    launch: LaunchFlags,
    option: Option | None,
    flag: str,
    read: Callable[[str], tuple[str | None, str]],
) -> str | None:
    """Add `flag` for a torchrun count `option` (`read` makes mfsdp's value of its text, or
    says why there is none); its value, "1" where it is left out."""
    if option is None:
        return "1"
    if not option.known:
        launch.add(flag, None, f"torchrun {option.shown}", "known only when the script runs")
        return None
    value, why = read(option.value)
    if value is None:
        launch.add(flag, None, f"torchrun {option.shown}", why)
    elif value != "1":
        launch.add(flag, value, f"torchrun {option.shown}")
    return value


def _per_node(text: str) -> tuple[str | None, str]:
    """mfsdp's --nproc-per-node for torchrun's: a count as it is; `gpu`, `auto`, `cpu`,
    `xpu` count the devices of the machine torchrun runs on, which only it knows."""
    if _COUNT.fullmatch(text):
        return str(int(text)), ""
    return None, "one process per device of the machine it runs on, counted there"


def _node_count(text: str) -> tuple[str | None, str]:
    """mfsdp's --nnodes for torchrun's: a count (`2`, or `2:2`) as it is; an elastic range
    (`1:4`) starts as many machines as come, which only the run knows."""
    low, _colon, high = text.partition(":")
    if _COUNT.fullmatch(low) and (not high or high == low):
        return str(int(low)), ""
    return None, "a range of machines (elastic), while mfsdp train takes a fixed count"


def _meeting(launch: LaunchFlags, torchrun: Torchrun) -> set[str]:
    """The rendezvous flags of a run on several machines: where they meet (torchrun's
    --rdzv-endpoint, else its --master-addr and --master-port), this machine's rank, the
    run's id. A rank or id known only when the script runs is left to mfsdp train (its
    rendezvous assigns ranks; its id is one per command), with a note. The options read."""
    endpoint = torchrun.given("rdzv_endpoint")
    address, port = torchrun.given("master_addr"), torchrun.given("master_port")
    if endpoint is not None:
        launch.add(
            "--rdzv-endpoint",
            endpoint.value if endpoint.known else None,
            f"torchrun {endpoint.shown}",
            "known only when the script runs",
        )
    elif address is not None:
        parts = [address] + ([port] if port is not None else [])
        known = all(part.known for part in parts)
        value = f"{address.value}:{port.value if port is not None else _TORCHRUN_DEFAULT_PORT}"
        launch.add(
            "--rdzv-endpoint",
            value if known else None,
            f"torchrun {' '.join(part.shown for part in parts)}",
            "known only when the script runs",
        )
    else:
        launch.add(
            "--rdzv-endpoint",
            None,
            "where the machines meet",
            "named by none of torchrun's options (--rdzv-endpoint, --master-addr)",
        )
    for dest, flag in (("node_rank", "--node-rank"), ("rdzv_id", "--rdzv-id")):
        option = torchrun.given(dest)
        if option is None:
            continue
        if option.known:
            launch.flags += [flag, option.value]
        else:
            launch.notes.append(
                f"torchrun {option.shown}: known only when the script runs; left out,"
                f" {flag} is mfsdp train's own (docs/multinode.md): give each machine's if"
                " it must be that"
            )
    return {"rdzv_endpoint", "master_addr", "master_port", "node_rank", "rdzv_id"}
