"""How many processes a converted verl run starts, as the `mfsdp train` flags that start
them (`--nproc-per-node 8`, `--nnodes 2`, ...), for the command line `mfsdp config
from-verl` writes at the top of the config: from the torchrun command that starts verl's
SFT trainer (`trainer.torchrun_options`), or from the GRPO run's trainer.n_gpus_per_node and
trainer.nnodes (verl's Ray trainer places its workers by them, whatever starts it).

Left out, the header's command started one process where verl ran eight, and the global
batch kept made the run eight times slower, without a word. A count known only when the
script runs (`--nproc-per-node=$1`, `${NGPUS}` unset, `gpu`) is never guessed: the command
holds a placeholder (`--nproc-per-node N`, which `mfsdp train` refuses, so a copy of it never
starts one process where verl ran several), keeping what is known of the value
(`--rdzv-endpoint {HOST}:29500`), and a note says where it comes from. Each flag is explained
once: the known ones by one note naming their source, each placeholder by its own (the
placeholder was said twice, once in each). The config itself is whole without it (a count is
no key of it): the conversion's exit status stays what its keys make it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainer.torchrun_options import Option, Torchrun
from trainer.verl_keys import keys_given
from trainer.verl_rules import LAUNCH, ignored_note

# what stands in the command for a value known only when the script runs
_PLACEHOLDERS = {
    "--nproc-per-node": "N",
    "--nnodes": "NODES",
    "--rdzv-endpoint": "HOST:PORT",
}
_COUNT = re.compile(r"[0-9]+")
_TORCHRUN_DEFAULT_PORT = "29500"  # torch/distributed/run.py: master_port's default
_UNKNOWN_HOST, _UNKNOWN_PORT = _PLACEHOLDERS["--rdzv-endpoint"].split(":")
# a host known only when the script runs beside a port known here: `HOST:29500` passes
# mfsdp train's check (HOST is a host name), whose rendezvous then waits minutes for a
# machine of that name; braces are no host name's, refused at once
_HOST_BESIDE_A_PORT = "{HOST}"
_RAY_KEYS = {"trainer.n_gpus_per_node": "--nproc-per-node", "trainer.nnodes": "--nnodes"}


@dataclass
class LaunchFlags:
    """The `mfsdp train` flags a converted run starts with, in order (a flag, then its value
    or placeholder), and notes on where each comes from. `replaced`: the notes the
    conversion's key table gives the verl keys these flags carry ("pass --nproc-per-node to
    mfsdp train", beside the command that passes it), which these notes say instead."""

    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)  # the flags whose values are known here

    def add(
        self, flag: str, value: str | None, source: str, why: str = "", placeholder: str = ""
    ) -> None:
        """`flag value`, from `source`; a value None is not known here (`source` is `why`):
        `placeholder` (the flag's own where empty) stands in the command (which `mfsdp
        train` refuses), with a note."""
        if value is None:
            placeholder = placeholder or _PLACEHOLDERS[flag]
            self.flags += [flag, placeholder]
            self.notes.append(
                f"{flag} {placeholder} in the command above: {source} is {why}: write the value"
            )
        else:
            self.flags += [flag, value]
            self.known += [flag, value]

    def name_source(self, source: str) -> None:
        """First among the notes, the one saying the known flags come from `source` (the
        options or keys read); the placeholders have their own notes."""
        if self.known:
            self.notes.insert(0, f"{source}: {' '.join(self.known)} in the command above")


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
    launch.name_source(f"torchrun {shown}")
    if others:
        launch.notes.append(
            f"torchrun {' '.join(others)}: not passed on; mfsdp train starts torchrun with"
            " settings of its own"
        )
    return launch


def ray_flags(pairs: list[tuple[str, Any]]) -> LaunchFlags | None:
    """The flags for a GRPO run's trainer.n_gpus_per_node and trainer.nnodes (`pairs`: the
    source's verl keys), the GPUs verl's Ray trainer runs on; None where it sets neither.
    Each key given is carried: as a flag, a placeholder, or (at 1) as `mfsdp train`'s
    default, so the key table's note telling to pass the flags is replaced. Keys are read
    as the key table reads them: `++trainer.n_gpus_per_node=8` (Hydra's force-add, common
    in verl's scripts) was left out of the command while the table said it was ignored."""
    given = {key: value for key, value in keys_given(pairs).items() if key in _RAY_KEYS}
    if not given:
        return None
    launch = LaunchFlags(replaced=[ignored_note(key, LAUNCH) for key in given])
    several = False  # machines, or a count known only when the script runs
    for key, flag in _RAY_KEYS.items():
        if key not in given:
            continue
        text = str(given[key]).strip()
        counted = _COUNT.fullmatch(text) is not None
        if not counted:
            launch.add(flag, None, f"{key}={text}", "no count known here")
        elif int(text) != 1:
            launch.add(flag, text, key)
        several = several or (flag == "--nnodes" and (not counted or int(text) != 1))
    launch.name_source(", ".join(f"{key}={given[key]}" for key in _RAY_KEYS if key in given))
    if several:  # `mfsdp train --nnodes 2` refuses to start without it
        launch.add(
            "--rdzv-endpoint",
            None,
            "where the machines meet",
            "the address of verl's Ray cluster (`ray start --head` on one machine), not in"
            " the script",
        )
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
        _master_endpoint(launch, address, port)
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
            launch.add(flag, option.value, f"torchrun {option.shown}")
        else:
            launch.notes.append(
                f"torchrun {option.shown}: known only when the script runs; left out,"
                f" {flag} is mfsdp train's own (docs/multinode.md): give each machine's if"
                " it must be that"
            )
    return {"rdzv_endpoint", "master_addr", "master_port", "node_rank", "rdzv_id"}


def _master_endpoint(launch: LaunchFlags, address: Option, port: Option | None) -> None:
    """--rdzv-endpoint from torchrun's --master-addr and --master-port (its default port
    where that is left out). A part known only when the script runs is a placeholder and the
    other part is kept (`{HOST}:29500`, `node0:PORT`): a known port was dropped with the
    unknown address."""
    unknown = [part for part in (address, port) if part is not None and not part.known]
    if port is not None and not port.known:
        number, unknown_host = _UNKNOWN_PORT, _UNKNOWN_HOST
    else:
        number = port.value if port is not None else _TORCHRUN_DEFAULT_PORT
        unknown_host = _HOST_BESIDE_A_PORT  # beside a known port, `HOST` would be taken
    endpoint = f"{address.value if address.known else unknown_host}:{number}"
    launch.add(
        "--rdzv-endpoint",
        None if unknown else endpoint,
        f"torchrun {' '.join(part.shown for part in unknown)}",
        "known only when the script runs",
        placeholder=endpoint,
    )
