"""What the machines of one run must share, checked once its process group forms.

Every machine of a `--nnodes` run starts from its own command line: a YAML edited on one
node, another checkout or an override typed on one trained with mixed settings (ranks
stepping their shards with different learning rates) or hung at the first collective one
side never reached (different `trainer.total_steps`). And a run dir on each machine's own
disk left rank 0 committing checkpoints whose other ranks' files it did not hold. Both are
refused here, before any step, on every rank, in one line (exit 2) that names each machine
by the `--node-rank` it was launched with and its host (`trainer.node_rank`): the user
started machines by `--node-rank`, and torchrun's own numbering of them is not that.

One config can still name other contents on each machine: a path is read on every machine
(a relative one from its working dir), and a stale copy of the data on one node trained
each rank on other rows with exit 0, or hung where the row counts gave another number of
steps. So once the files are read, what each machine read through a key (its rows, its
tokenizer, its model config: `trainer.machines_read`) is compared too (`check_same_reads`).
"""

from __future__ import annotations

import hashlib
import json
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpUsageError
from trainer.config import config_to_dict
from trainer.env_ints import env_int
from trainer.node_rank import given_node_rank, machine_names

PROBE_PREFIX = ".mfsdp_machines_probe_"  # rank 0 writes it in the run dir and removes it


class MachinesDisagreeError(MfsdpUsageError):
    """The machines of one run were started with different configs or run dirs."""

    every_rank = True  # every rank finds it alike: rank 0 says it, once


def check_machines_agree(cfg: Any) -> None:
    """Refuse a run whose ranks were given different resolved configs, then (ranks on
    several machines) a run dir that some machine does not share with rank 0's. A no-op
    for a run of one rank."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    check_same_config(config_to_dict(cfg))
    if on_several_machines():
        check_shared_run_dir(Path(cfg.trainer.run_dir))


def on_several_machines() -> bool:
    """Whether this run's ranks run on more than one machine (fewer here than in all)."""
    if not dist.is_initialized():
        return False
    return env_int("LOCAL_WORLD_SIZE", 1, minimum=1) < dist.get_world_size()


def check_same_config(config: Mapping[str, Any]) -> None:
    """One all_gather of a digest of `config` (and the machine: `_machine`); only when they
    differ, a second one of the configs themselves, to name the first key that differs and
    each machine's value of it."""
    flat = dict(_flattened("", config))
    digest = hashlib.sha256(json.dumps(flat, default=str).encode()).hexdigest()
    digests = _gathered((digest, _machine()))
    if len({d for d, _ in digests}) == 1:
        return
    configs = _gathered(flat)
    key = next(k for k in _keys(configs) if len({_held(c, k) for c in configs}) > 1)
    held: dict[str | None, list[int]] = {}
    for rank, config_of in enumerate(configs):
        held.setdefault(_held(config_of, key), []).append(rank)
    machines = [machine for _, machine in digests]
    where = "; ".join(
        f"{_given(ranks, machines)} {key}={value}"
        if value is not None
        else f"{machine_names(ranks, machines)} left {key} unset"
        for value, ranks in held.items()
    )
    raise MachinesDisagreeError(
        f"{key}: the machines of this run were given different configs ({cut_to(where, 400)});"
        " give every machine the same config file and overrides"
    )


@dataclass(frozen=True)
class Read:
    """What this rank read through one config key (`key`: data.train_files), for
    `check_same_reads`: `what` it is, plural (data, tokenizers), and `value`, as a line
    shows this rank's (`100 rows (digest 3f1e2d0c9b8a)`): equal wherever the contents are."""

    key: str
    what: str
    value: str


def check_same_reads(reads: Sequence[Read]) -> None:
    """One all_gather of every rank's `reads` (the same keys, in the same order, on every
    rank); the first key whose value differs between ranks is refused, naming each machine
    and what it read. Every rank raises alike."""
    every = _gathered(([read.value for read in reads], _machine()))
    machines = [machine for _, machine in every]
    for index, read in enumerate(reads):
        held: dict[str, list[int]] = {}
        for rank, (values, _) in enumerate(every):
            held.setdefault(values[index], []).append(rank)
        if len(held) == 1:
            continue
        where = "; ".join(
            f"{machine_names(ranks, machines)} read {value}" for value, ranks in held.items()
        )
        raise MachinesDisagreeError(
            f"{read.key}: the machines of this run read different {read.what} through it"
            f" ({cut_to(where, 400)}); each machine reads the path itself (a relative one from"
            " its working dir): give every machine the same files, or put them on storage"
            " every machine sees"
        )


def check_shared_run_dir(run_dir: Path) -> None:
    """Rank 0 writes a probe file in the run dir; each machine's local rank 0 reads it back.
    A machine that does not see it holds the run dir on storage of its own: its ranks'
    checkpoint files would never reach the step dir rank 0 commits."""
    rank = dist.get_rank()
    name: list[str | None] = [None]
    if rank == 0:
        name[0] = _write_probe(run_dir)
    dist.broadcast_object_list(name, src=0)
    probe = name[0]
    if probe is None:  # rank 0 could not write it: the run dir's own checks say why
        return
    seen = env_int("LOCAL_RANK", 0) != 0 or _reads(run_dir / probe, probe)
    every = _gathered((seen, _machine()))
    if rank == 0:
        (run_dir / probe).unlink(missing_ok=True)
    blind = [r for r, (ok, _) in enumerate(every) if not ok]
    if blind:
        machines = [machine for _, machine in every]
        raise MachinesDisagreeError(
            f"trainer.run_dir={run_dir}: {machine_names(blind, machines)} cannot see the files"
            f" {machine_names([0], machines)} writes there (rank 0); trainer.run_dir must be on"
            " storage every machine sees (a shared file system), or checkpoints lack those"
            " machines' files"
        )


def _write_probe(run_dir: Path) -> str | None:
    name = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(name, encoding="utf-8")
    except OSError:
        return None
    return name


def _reads(path: Path, expected: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == expected
    except OSError:
        return False


def _machine() -> tuple[int | None, str]:
    """This rank's machine as a line names it: the `--node-rank` it was launched with (None
    when not known) and its host name."""
    return given_node_rank(), socket.gethostname()


def _given(ranks: list[int], machines: list[tuple[int | None, str]]) -> str:
    """`machine --node-rank 1 (host h2) was given`: who holds a value, by machine."""
    verb = "was given" if len({machines[rank] for rank in ranks}) == 1 else "were given"
    return f"{machine_names(ranks, machines)} {verb}"


def _gathered(value: Any) -> list[Any]:
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, value)
    return every


def _flattened(prefix: str, tree: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every setting of `tree` by its dotted key. A mapping is descended into even when
    empty (it sets nothing): kept as a leaf, an empty `model.overrides` on one machine was
    named as the key that differs from another machine's `model.overrides.num_hidden_layers`."""
    items: list[tuple[str, Any]] = []
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            items += _flattened(f"{dotted}.", value)
        else:
            items.append((dotted, value))
    return items


def _held(config: Mapping[str, Any], key: str) -> str | None:
    """`key`'s value in `config` as a line shows it; None where `config` lacks `key` (unset,
    never shown as a value: a JSON null would claim the machine was given one)."""
    return _shown(config[key]) if key in config else None


def _keys(configs: list[dict[str, Any]]) -> list[str]:
    """Every key of `configs`, in the order the first config that has it lists it."""
    return list(dict.fromkeys(key for config in configs for key in config))


def _shown(value: Any) -> str:
    return json.dumps(value, default=str)
