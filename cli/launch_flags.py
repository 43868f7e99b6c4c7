"""The torchrun flags of `mfsdp train`, checked before anything starts.

torchrun took a node rank outside 0..nnodes-1 (or one without --nnodes) and an endpoint
without a port or with a host that is no name, and then waited for peers forever, repeating
a warning; an odd --rdzv-id was a traceback (it names a temp dir).
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, NoReturn

import click

from cli.errors import EXIT_USAGE, fail

if TYPE_CHECKING:
    from cli.launch import Launch

# torchrun names a temp dir after the id (a `/` in it was a traceback) and an empty one is a
# random id per machine, so they never meet; `test-127.0.0.1:29500` or a Slurm job id pass
RDZV_ID = re.compile(r"[A-Za-z0-9._:@+-]{1,128}")
_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")  # a host name's part


def check_launch(launch: Launch) -> None:
    """Each mistake in the flags exits 2 in one line naming its flag."""
    for flag, value in (("--nproc-per-node", launch.nproc_per_node), ("--nnodes", launch.nnodes)):
        if value < 1:
            _refuse(f"{flag} must be >= 1")
    rank = launch.node_rank
    if rank is not None and rank >= launch.nnodes:
        if launch.nnodes == 1:
            _refuse(
                f"--node-rank {rank}: a run on one machine is node 0; for a run on several "
                "machines give --nnodes M too (the same on each)"
            )
        _refuse(
            f"--node-rank {rank}: must be 0..{launch.nnodes - 1}, this machine's index among "
            f"--nnodes {launch.nnodes}"
        )
    if launch.nnodes > 1 and launch.rdzv_endpoint is None:
        _refuse("--nnodes > 1 needs --rdzv-endpoint HOST:PORT that every machine reaches")
    if launch.rdzv_endpoint is not None:
        problem = _endpoint_problem(launch.rdzv_endpoint)
        if problem:
            _refuse(f"--rdzv-endpoint {launch.rdzv_endpoint!r}: {problem}")
    if not RDZV_ID.fullmatch(launch.rdzv_id):
        _refuse(
            f"--rdzv-id {launch.rdzv_id!r}: use 1 to 128 letters, digits or . _ - : @ + "
            "(the same on every machine of the run)"
        )


def _refuse(message: str) -> NoReturn:
    """A launch flag's mistake: exit 2 in one line ending where the command's --help is
    (`help_pointer`); `--nproc-per-node two` had it and `--nproc-per-node 0` did not."""
    fail(message + help_pointer(), EXIT_USAGE)


def help_pointer() -> str:
    """`; see 'mfsdp train sft --help'` for the command running, as click's own usage errors
    end (cli/app.py) and README promises for every command-line mistake; "" outside one."""
    ctx = click.get_current_context(silent=True)
    return f"; see '{ctx.command_path} --help'" if ctx else ""


def _endpoint_problem(endpoint: str) -> str | None:
    """What is wrong with a HOST:PORT rendezvous endpoint (`[ADDRESS]:PORT` for IPv6), or None."""
    if not endpoint:
        return "empty; give HOST:PORT that every machine reaches (node 0's address)"
    if endpoint.startswith("["):
        address, bracket, port = endpoint[1:].partition("]")
        if not bracket:
            return "no closing ']'; write an IPv6 address as [ADDRESS]:PORT"
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            return f"{address!r} in brackets is not an IPv6 address"
        if "%" in address:  # torchrun's parser refuses a zone index (a traceback)
            return f"{address!r}: torchrun takes no zone index (%...); leave it out"
        if not port.startswith(":"):
            return f"no port; give [{address}]:PORT (e.g. [{address}]:29500)"
        port = port[1:]
    else:
        host, colon, port = endpoint.rpartition(":")
        if not colon:
            return f"no port; give HOST:PORT (e.g. {endpoint}:29500)"
        if ":" in host:
            return "an IPv6 address goes in brackets: [ADDRESS]:PORT (e.g. [::1]:29500)"
        if not host:
            return "no host; give HOST:PORT that every machine reaches (node 0's address)"
        problem = _host_problem(host)
        if problem:
            return problem
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        return f"port {port!r} is not a number 1..65535"
    return None


def _host_problem(host: str) -> str | None:
    labels = host.removesuffix(".").split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return f"{host!r} is not a host name or an IPv4 address"
    if all(label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"{host!r} is not an IPv4 address"
    return None
