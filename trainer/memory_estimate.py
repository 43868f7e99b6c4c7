"""A lower bound on the memory a training run's model states take, compared with the memory
the process may use, before the model is built.

A model whose weights, grads and AdamW moments cannot fit failed at its first step, minutes
in (building a 1.5B model on a CPU took 100 s), and the out-of-memory line advised lowering
the batch or sequence length, which frees nothing near enough. Counted before the build, a
warning names the real cause; counted once, the out-of-memory advice says it too
(`states_advice`). A warning, not a refusal: activations are not counted and the memory
available now is not the memory available at the first step, so the estimate is "at least".

Standard library only (and `env_int`, which is too): `cli.errors` asks `states_advice` in
every command's process.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

from trainer.env_ints import env_int

# Trained in float32 with AdamW: the weights, their grads and the two moments (4 bytes each)
BYTES_PER_TRAINED_PARAM = 16
# A frozen weight (LoRA's base model) is its float32 value alone
BYTES_PER_FROZEN_PARAM = 4
_MEMINFO = Path("/proc/meminfo")
_STATUS = Path("/proc/self/status")
_CGROUP = Path("/sys/fs/cgroup")

# The verdict of this process's last `check_model_states` that found too little memory: the
# out-of-memory advice of a run that goes on and fails (`states_advice`)
_too_big: list[str] = []


@dataclass(frozen=True)
class ModelStates:
    """What a rank holds of the model's states: `params` of `bytes_per_param` each, sharded
    over `shards` ranks (FSDP shards weights, grads and optimizer states alike)."""

    params: int
    bytes_per_param: int
    shards: int = 1

    @property
    def per_rank(self) -> int:
        return -(-self.params * self.bytes_per_param // self.shards)

    def counted(self) -> str:
        """`1.5B params x 16 bytes`, and `/ N ranks` where sharded."""
        sharded = f" / {self.shards} ranks" if self.shards > 1 else ""
        return f"{_count(self.params)} params x {self.bytes_per_param} bytes{sharded}"


@dataclass(frozen=True)
class MemoryRoom:
    """Memory a process may still take: `size` bytes, `said` as a noun phrase ("the 8.0 GB
    this machine has available"); `shared` where every rank on the machine draws on it (the
    machine's, its cgroup's), not where each process has its own (its address space, its
    GPU)."""

    size: int
    said: str
    shared: bool


def model_states(params: int, *, lora: bool, shards: int) -> ModelStates:
    """The model states of a model of `params` parameters trained over `shards` ranks: all of
    them trained, or with `lora` frozen (its adapters are few: not counted)."""
    return ModelStates(params, BYTES_PER_FROZEN_PARAM if lora else BYTES_PER_TRAINED_PARAM, shards)


def host_memory_rooms() -> list[MemoryRoom]:
    """The host memory this process may take, each limit that is set: the machine's
    MemAvailable, its cgroup's memory.max less what the cgroup uses, and the address space
    `ulimit -v` (RLIMIT_AS) leaves it."""
    rooms = []
    available = _proc_bytes(_MEMINFO, "MemAvailable")
    if available is not None:
        rooms.append(
            MemoryRoom(available, f"the {_size(available)} this machine has available", True)
        )
    cgroup = _cgroup_room()
    if cgroup is not None:
        said = f"the {_size(cgroup)} more its cgroup allows (memory.max)"
        rooms.append(MemoryRoom(cgroup, said, True))
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    mapped = _proc_bytes(_STATUS, "VmSize")
    if limit != resource.RLIM_INFINITY and mapped is not None:
        room = max(limit - mapped, 0)
        said = f"the {_size(room)} more this process may map (ulimit -v)"
        rooms.append(MemoryRoom(room, said, False))
    return rooms


def gpu_room(free: int, index: int) -> MemoryRoom:
    """The `free` bytes of GPU `index`, which its rank alone uses."""
    return MemoryRoom(free, f"the {_size(free)} free on GPU {index}", False)


def check_model_states(
    states: ModelStates, rooms: list[MemoryRoom], ranks_here: int = 1
) -> str | None:
    """The warning line when `states` cannot fit in one of `rooms`, else None; `ranks_here`
    ranks of this machine draw on a shared room. The verdict is kept for `states_advice`."""
    for room in rooms:
        need = states.per_rank * (ranks_here if room.shared else 1)
        if need <= room.size:
            continue
        together = room.shared and ranks_here > 1
        each = f" for {ranks_here} ranks here, {_size(states.per_rank)} each" if together else ""
        remedy = _remedy(states, room)
        _too_big[:] = [
            f"the model states alone need at least {_size(need)}, more than {room.said}:"
            f" {remedy}; a smaller batch cannot free that much"
        ]
        return (
            f"model states need at least ~{_size(need)}{each} ({states.counted()}),"
            f" more than {room.said}: the run will likely fail out of memory; {remedy}"
        )
    _too_big.clear()
    return None


def _remedy(states: ModelStates, room: MemoryRoom) -> str:
    """What makes `states` fit `room`: a smaller model, LoRA where the model is trained
    whole, and more of what FSDP shards the states over: machines where the ranks of one
    share the room, else ranks."""
    fewer = "a smaller model"
    if states.bytes_per_param == BYTES_PER_TRAINED_PARAM:
        fewer += ", LoRA (model.lora_rank)"
    more = "machines (--nnodes)" if room.shared else "ranks (--nproc-per-node, --nnodes)"
    return f"use {fewer} or more {more} to shard them over"


def states_advice() -> str | None:
    """The out-of-memory advice of a run whose model states were found too large for the
    memory before it built the model, else None."""
    return _too_big[0] if _too_big else None


def _count(params: int) -> str:
    return f"{params / 1e9:.1f}B" if params >= 10**9 else f"{params / 1e6:.1f}M"


def _size(size: int) -> str:
    return f"{size / 1e9:.1f} GB"


def _proc_bytes(path: Path, key: str) -> int | None:
    """The bytes of `key:   N kB` in a /proc file, None where there is none (not Linux)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        words = value.split()
        if name == key and words and words[0].isdigit():
            return int(words[0]) * 1024
    return None


def _cgroup_room() -> int | None:
    """memory.max less memory.current of this process's cgroup (v2), None where no limit is
    set or it cannot be read."""
    try:
        entry = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    group = next((line[3:] for line in entry if line.startswith("0::")), None)
    if group is None:
        return None
    where = _CGROUP / group.lstrip("/")
    try:
        limit = (where / "memory.max").read_text().strip()
        used = (where / "memory.current").read_text().strip()
    except OSError:
        return None
    if not limit.isdigit() or not used.isdigit():  # "max": no limit
        return None
    return max(int(limit) - int(used), 0)


def ranks_here(world_size: int) -> int:
    """The ranks on this machine of a run of `world_size` ranks: its launcher's
    LOCAL_WORLD_SIZE (read as every rank variable is, `env_int`), at most `world_size`; 1
    for a process that trains alone, whatever a stale `export LOCAL_WORLD_SIZE` says (it
    counted ranks that never ran and warned a fitting model would fail)."""
    if world_size <= 1:
        return 1
    return min(env_int("LOCAL_WORLD_SIZE", 1, minimum=1), world_size)
