"""Megatron's distributed-optimizer state in a form that is not per-parameter.

megatron-core saves a DistributedOptimizer's state in a torch_dist checkpoint in one of
three forms (`distrib_optim_sharding_type`): `fully_reshardable` stores it per parameter
(`optimizer.state.<param>.exp_avg`), which Megatron-LM's inspector converts and mfsdp
checks against each parameter; `dp_reshardable` (Megatron-LM's default unless
`--dist-ckpt-optim-fully-reshardable`) stores flat per-bucket buffers,
`optimizer.distributed.dp_group_idx_N.gbuf_idx_N.dtype_(...).bucket_idx_N.exp_avg`, beside
`per_bucket_numel` objects; the deprecated `dp_zero_gather_scatter` stores each bucket's
states pickled in one object, `optimizer.distributed.dp_group_idx_N.param_state`. Which
parameter each element of a bucket belongs to lies in the run's grad-buffer layout, not in
the checkpoint, so neither flat form can be checked against (or turned into) per-parameter
state. Megatron-LM's inspector (`convert-torch-dist-to-fsdp-dtensor`) knows only
`optimizer.state.*`: it files the flat buffers under the model entry
(`model.module.optimizer.distributed....exp_avg`) and copies the pickled object unchanged.
These are told here by their names alone, so that neither is taken for a model weight nor
for a save without optimizer state.
"""

from __future__ import annotations

import io
import os
import pickletools
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mfsdp_ckpt.format.dcp_metadata import MAX_METADATA_BYTES
from mfsdp_ckpt.format.layout import DCP_METADATA_FILE

DP_RESHARDABLE = "dp_reshardable"
DP_ZERO_GATHER_SCATTER = "dp_zero_gather_scatter"
# `optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, torch.float32)
# .bucket_idx_0.exp_avg`, under any entry (the inspector's `model.module.` among them)
_FLAT_BUCKET_RE = re.compile(
    r"(?:^|\.)optimizer\.distributed\.dp_group_idx_[0-9]+\.gbuf_idx_[0-9]+\.dtype_\([^)]*\)"
    r"\.bucket_idx_[0-9]+\.([A-Za-z0-9_]+)$"
)
# `optimizer.distributed.dp_group_idx_0.param_state` (a ShardedObject: `/shard_0_1` follows)
_PARAM_STATE_RE = re.compile(
    r"(?:^|\.)optimizer\.distributed\.dp_group_idx_[0-9]+\.param_state(?:/|$)"
)
_KEY_TEXT = "optimizer.distributed.dp_group_idx_"  # how a torch_dist save's flat keys start
_KEY_START = _KEY_TEXT.encode()
_KEY_WINDOW_BYTES = 512  # after a key's start: the rest of the key (DCP keys are short)
_MAX_MATCHES = 1024  # keys looked at per .metadata (a few per dp group); one names the form
_CHUNK_BYTES = 8 << 20  # what the search holds of a .metadata at once
# What a user does to get per-parameter optimizer state from Megatron-LM
RESAVE = (
    "re-save from Megatron-LM with --dist-ckpt-optim-fully-reshardable to keep per-parameter"
    " optimizer state"
)


@dataclass(frozen=True)
class FlatOptimizerState:
    """Megatron's optimizer state in a flat form: `form` (DP_RESHARDABLE or
    DP_ZERO_GATHER_SCATTER), `first`, the first key holding it, and `states`, the state
    names its flat buffers carry (sorted; empty where they are pickled in one object)."""

    form: str
    first: str
    states: tuple[str, ...] = ()

    def describe(self) -> str:
        """`Megatron's dp_reshardable optimizer state (flat per-bucket exp_avg, ...)`."""
        held = f"flat per-bucket {', '.join(self.states)}" if self.states else "pickled per bucket"
        return f"Megatron's {self.form} optimizer state ({held}, not per parameter)"


def is_flat_bucket(key: str) -> bool:
    """Whether `key` is one of a dp_reshardable save's flat per-bucket buffers, wherever
    it is filed (Megatron-LM's inspector puts them under the model entry)."""
    return _FLAT_BUCKET_RE.search(key) is not None


def flat_optimizer_state(keys: Iterable[str]) -> FlatOptimizerState | None:
    """The flat optimizer state among a checkpoint's keys (tensors and objects), or None
    where it holds none: flat buffers are dp_reshardable's, a `param_state` object
    dp_zero_gather_scatter's."""
    first: dict[str, str] = {}
    states: set[str] = set()
    for key in keys:
        bucket = _FLAT_BUCKET_RE.search(key)
        if bucket is not None:
            first.setdefault(DP_RESHARDABLE, key)
            states.add(bucket.group(1))
        elif _PARAM_STATE_RE.search(key):
            first.setdefault(DP_ZERO_GATHER_SCATTER, key)
    if DP_RESHARDABLE in first:
        return FlatOptimizerState(DP_RESHARDABLE, first[DP_RESHARDABLE], tuple(sorted(states)))
    if DP_ZERO_GATHER_SCATTER in first:
        return FlatOptimizerState(DP_ZERO_GATHER_SCATTER, first[DP_ZERO_GATHER_SCATTER])
    return None


def form_in_metadata(metadata: Path) -> FlatOptimizerState | None:
    """The flat optimizer state a DCP's `.metadata` names, told from its key names without
    unpickling it (a torch_dist `.metadata` holds torch's SavePlans, which the restricted
    reader refuses): searched a chunk at a time, each `optimizer.distributed.` key decoded
    from the string opcode before its text. None where it names none, or is a link, no
    regular file, unreadable or larger than the DCP reader takes (reading it says why)."""
    keys: list[str] = []
    try:
        fd = os.open(metadata, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # missing, unreadable, or a link (never followed out of the save)
        return None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or not 0 < found.st_size <= MAX_METADATA_BYTES:
            return None
        overlap = len(_KEY_START) - 1
        for offset in range(0, found.st_size, _CHUNK_BYTES):
            chunk = os.pread(fd, _CHUNK_BYTES + overlap, offset)
            at = chunk.find(_KEY_START)
            while 0 <= at < _CHUNK_BYTES and len(keys) < _MAX_MATCHES:
                keys.append(_key_at(fd, offset + at))
                at = chunk.find(_KEY_START, at + 1)
            if len(keys) >= _MAX_MATCHES:
                break
    except OSError:
        return None
    finally:
        os.close(fd)
    return flat_optimizer_state(keys)


_STRING_OPS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"})
_LENGTH_BYTES = (1, 4, 8)  # before a pickled string's text: its opcode, then its length


def _key_at(fd: int, at: int) -> str:
    """The pickled string whose text starts at byte `at`: decoded from the string opcode
    that may start 1 + 1, 4 or 8 bytes before it (never unpickled); "" where none does."""
    for width in _LENGTH_BYTES:
        start = at - 1 - width
        if start < 0:
            continue
        window = io.BytesIO(os.pread(fd, _KEY_WINDOW_BYTES + 1 + width, start))
        try:
            op, arg, _pos = next(pickletools.genops(window))
        except (ValueError, UnicodeDecodeError, StopIteration):
            continue
        if op.name in _STRING_OPS and isinstance(arg, str) and arg.startswith(_KEY_TEXT):
            return arg
    return ""


def refusal_note(dcp: Path) -> str:
    """What a torch_dist save's refusal adds about its optimizer state: "" unless it is in
    a flat form, which Megatron-LM's inspector leaves unconverted."""
    found = form_in_metadata(dcp / DCP_METADATA_FILE)
    if found is None:
        return ""
    return (
        f"; its optimizer state is {found.form} ([{found.first}]), which the inspector"
        " does not convert: the weights convert, the optimizer state stays in that form"
        f" ({RESAVE})"
    )
