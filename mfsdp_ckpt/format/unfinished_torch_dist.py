"""A Megatron torch_dist save that did not finish, told apart without unpickling it.

megatron-core writes a torch_dist save's `metadata.json` last (the save's finalize step,
after every `*.distcp` and the `.metadata`), and that file is how it and we tell the
format apart. A run stopped in between leaves a DCP that looks like one of ours: offered
as a step to read, it was then refused by the restricted unpickler naming a `SavePlan`
global, which says nothing of what the dir is. Its `.metadata` still shows its writer:
megatron-core stores the ranks' save plans in it (`Metadata.all_local_plans`, a list of
torch's `SavePlan`) and the save's common state as the `common_state` entry
(`common_state/shard_0_1`); neither is in a DCP that torch, mfsdp or Megatron's
fsdp_dtensor save writes. Megatron-LM's converter to fsdp_dtensor
(`checkpoint_inspector.py convert-torch-dist-to-fsdp-dtensor`) copies every bytes entry of
its input, the common_state one too, into a finished DCP of `model.module.*` tensors and
no SavePlans: the common_state entry is a sign only in a DCP whose tensors are not named
so (a torch_dist save's are `decoder.*`, `embedding.*`, `optimizer.*`). All are found here
by their pickle opcodes in windows around byte matches: the file is searched a chunk at a
time and never unpickled, holding a chunk, not the file (a mapped file searched whole held
every page it touched, 8 GB for a sparse 8 GiB `.metadata`; a full opcode walk in Python
reads about 10 MB/s). The whole file is searched, not a window at its start: megatron-core
sets `all_local_plans` on the Metadata after building it, so the first SavePlan is pickled
after `state_dict_metadata` and `storage_data`, which grow with the tensors and shards
saved, and `common_state` is one key among `state_dict_metadata`'s, anywhere in it. A
search of 1 GiB takes seconds, and one command asks of the same dir several times (the
step list, the tracked step's check, the reader): each file is searched once per process,
its verdict kept by path and stat identity (`SCANS`). A file over MAX_METADATA_BYTES is
not searched: the DCP reader refuses it, naming its size. An older megatron-core (common
state in `common.pt`, written before the DCP) is told by that file. What is looked at is
confined to the step the dir lies in, as every read of a checkpoint is (`dir_entries`): a
`dist_ckpt/` (or a role dir) linking out of its step is not searched, and reading it names
the link.

Of the other formats `foreign_formats` names, none has a marker that its save writes
last: Megatron's legacy `mp_rank_NN/`, DeepSpeed's and Accelerate's per-rank files and
verl's FSDP shards are each recognised by the files holding the weights; torchtitan's
DCP and verl's `ckpt_contents.json` are judged by `run_steps.unfinished_save`.
"""

from __future__ import annotations

import io
import os
import pickletools
import stat
from pathlib import Path

from mfsdp_ckpt.format.dcp_metadata import MAX_METADATA_BYTES
from mfsdp_ckpt.format.layout import (
    DCP_METADATA_FILE,
    DIST_CKPT_DIR,
    MANIFEST_FILE,
    ROLES,
    VERL_MODEL_DIR,
)
from mfsdp_ckpt.storage.confined_stat import LeadsOutError, confined_stat

TORCH_DIST_MARKER = "metadata.json"
LEGACY_COMMON_FILE = "common.pt"
UNFINISHED_TORCH_DIST = (
    f"a Megatron torch_dist save that did not finish (no {TORCH_DIST_MARKER}, which"
    " megatron-core writes last)"
)
# What such a save lacks, as a list of a run's step dirs says it ("holds no ...")
UNFINISHED_TORCH_DIST_LACKS = (
    f"{TORCH_DIST_MARKER} (a Megatron torch_dist save, whose {TORCH_DIST_MARKER}"
    " megatron-core writes last)"
)

_PLANNER_MODULE = "torch.distributed.checkpoint.planner"
_SAVE_PLAN = "SavePlan"
_COMMON_STATE_KEY = "common_state/shard_0_1"  # ShardedObject("common_state", (1,), (0,))
_MEMO_OPS = frozenset({"MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"})
_STRING_OPS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"})
# Where a string's opcode may start before its text: SHORT_BINUNICODE (1 byte of length),
# BINUNICODE (4), BINUNICODE8 (8); protocol 0's UNICODE has no length
_LENGTH_BYTES = (1, 4, 8)
_WINDOW_BYTES = 128  # after a match: the string's op, its memo op and the next op
_KEY_WINDOW_BYTES = 4096  # after a key's start: the whole key's op (DCP keys are short)
_MAX_MATCHES = 64  # byte matches checked per pattern; a real save has one or two
_CHUNK_BYTES = 8 << 20  # searched at once: what the search holds of the file
# How Megatron-FSDP's fsdp_dtensor save (and the converter to it) names the model's tensors
_FSDP_DTENSOR_PREFIX = "model.module."
_PATTERNS = tuple(
    text.encode() for text in (_SAVE_PLAN, _PLANNER_MODULE, _COMMON_STATE_KEY, _FSDP_DTENSOR_PREFIX)
)
# The dirs a DCP dir lies in below its step (verl's role/model/dist_ckpt): what it is
# confined to is the step above them
_BELOW_STEP = frozenset({DIST_CKPT_DIR, VERL_MODEL_DIR, *ROLES})
_MAX_KEPT = 4096  # verdicts kept: one per DCP dir a command looks at


class Scans:
    """Each `.metadata`'s verdict by its path and stat identity (device, inode, size,
    mtime): a file rewritten since is searched again, one asked of again is not even
    opened. `searched` counts the searches."""

    def __init__(self) -> None:
        self.verdicts: dict[tuple[str, int, int, int, int], bool] = {}
        self.searched = 0

    def written_by_megatron(self, metadata: Path, found: os.stat_result) -> bool:
        """The `.metadata` (`found`: its stat) names torch's SavePlan as a global, or holds
        the common_state entry and no `model.module.*` key (fsdp_dtensor's). A file that
        cannot be opened, or is empty or larger than the DCP reader takes, is no sign of
        either: reading it says why."""
        verdict = self.verdicts.get(_identity(metadata, found))
        if verdict is not None:
            return verdict
        try:
            with open(metadata, "rb") as handle:
                fd = handle.fileno()
                opened = os.fstat(fd)
                if not 0 < opened.st_size <= MAX_METADATA_BYTES:
                    return False
                if len(self.verdicts) >= _MAX_KEPT:
                    self.verdicts.clear()
                self.searched += 1
                matches = _matches(fd, opened.st_size)
                verdict = _names_save_plan(fd, matches) or (
                    _string_pushed(fd, matches, _COMMON_STATE_KEY)
                    and not _string_pushed(fd, matches, _FSDP_DTENSOR_PREFIX, prefix=True)
                )
        except OSError:
            return False
        self.verdicts[_identity(metadata, opened)] = verdict
        return verdict


def _identity(path: Path, found: os.stat_result) -> tuple[str, int, int, int, int]:
    return (str(path), found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)


SCANS = Scans()


def is_unfinished_torch_dist(directory: Path, names: list[str]) -> bool:
    """Whether `directory` (holding `names`) is a torch_dist save stopped before its
    `metadata.json`: a DCP (`.metadata`) whose files show megatron-core wrote it."""
    if TORCH_DIST_MARKER in names or DCP_METADATA_FILE not in names:
        return False
    if os.path.lexists(directory.parent / MANIFEST_FILE):
        return False  # mfsdp's step, its dist_ckpt/ beside the manifest: not scanned
    step = _step_of(directory)
    metadata = directory / DCP_METADATA_FILE
    found = _file_inside(metadata, step)
    if found is None:
        return False
    if LEGACY_COMMON_FILE in names and _file_inside(directory / LEGACY_COMMON_FILE, step):
        return True
    return SCANS.written_by_megatron(metadata, found)


def _step_of(directory: Path) -> Path:
    """The step dir `directory` lies in by the layouts' names (itself for Megatron's
    `iter_N/`, which is the DCP dir; `global_step_N` for verl's `actor/dist_ckpt`)."""
    while directory.name in _BELOW_STEP and directory.parent != directory:
        directory = directory.parent
    return directory


def _file_inside(path: Path, step: Path) -> os.stat_result | None:
    """The stat of a regular file (not a link to one) reached inside `step`, else None: a
    link on the way that leads out is not followed (reading the dir names it), a dir not
    to be searched is left to reading it to name."""
    try:
        found = confined_stat(path, step, follow_symlinks=False)
    except (LeadsOutError, PermissionError):
        return None
    return found if found is not None and stat.S_ISREG(found.st_mode) else None


# Where each pattern's bytes start in the file, the first _MAX_MATCHES of each
Matches = dict[str, list[int]]


def _names_save_plan(fd: int, found: Matches) -> bool:
    """A GLOBAL `torch.distributed.checkpoint.planner SavePlan` (protocols 0-3), or a
    STACK_GLOBAL (protocol 4+) taking a pushed "SavePlan" with the planner module pushed
    in the file (just before, or earlier and taken from the memo)."""
    for at in found[_SAVE_PLAN]:
        ops = _ops_from(fd, at - len(_PLANNER_MODULE) - 2)  # c<module>\nSavePlan\n
        if ops and ops[0] == ("GLOBAL", f"{_PLANNER_MODULE} {_SAVE_PLAN}"):
            return True
        for ops in _string_ops_at(fd, at, _SAVE_PLAN):
            following = [name for name, _arg in ops[1:] if name not in _MEMO_OPS]
            if following[:1] == ["STACK_GLOBAL"]:
                return _string_pushed(fd, found, _PLANNER_MODULE)
    return False


def _string_pushed(fd: int, found: Matches, text: str, prefix: bool = False) -> bool:
    """Some opcode of the pickle pushes exactly the string `text` (with `prefix`: a
    string starting with it, such as a key)."""
    return any(_string_ops_at(fd, at, text, prefix) for at in found[text])


def _string_ops_at(
    fd: int, at: int, text: str, prefix: bool = False
) -> list[list[tuple[str, object]]]:
    """The opcodes decoded from each place a string op pushing `text` (its bytes at `at`;
    with `prefix`, a string starting there with `text`) could start, for the starts where
    the first one does."""
    found = []
    window = _KEY_WINDOW_BYTES if prefix else _WINDOW_BYTES
    for start in [at - 1 - width for width in _LENGTH_BYTES] + [at - 1]:
        ops = _ops_from(fd, start, window)
        pushed = ops[0][1] if ops and ops[0][0] in _STRING_OPS else None
        if pushed == text or (prefix and isinstance(pushed, str) and pushed.startswith(text)):
            found.append(ops)
    return found


def _ops_from(fd: int, start: int, size: int = _WINDOW_BYTES) -> list[tuple[str, object]]:
    """(name, arg) of the opcodes decoded from `start` to the end of a window of `size`
    bytes (a window cut mid-op ends the list there)."""
    if start < 0:
        return []
    ops: list[tuple[str, object]] = []
    window = io.BytesIO(os.pread(fd, size, start))
    try:
        for op, arg, _pos in pickletools.genops(window):
            ops.append((op.name, arg))
            if len(ops) == 4:
                break
    except (ValueError, UnicodeDecodeError):  # cut mid-op, or not an op at all
        pass
    return ops


def _matches(fd: int, size: int) -> Matches:
    """Where each of _PATTERNS starts in the file's `size` bytes, up to _MAX_MATCHES each:
    one pass, a chunk read at a time, each chunk overlapping the next by a pattern's length
    less one so that a match across their border is found (once: in the chunk it starts)."""
    found: dict[bytes, list[int]] = {pattern: [] for pattern in _PATTERNS}
    overlap = max(map(len, _PATTERNS)) - 1
    for offset in range(0, size, _CHUNK_BYTES):
        chunk = os.pread(fd, _CHUNK_BYTES + overlap, offset)
        for pattern, offsets in found.items():
            at = chunk.find(pattern)
            while 0 <= at < _CHUNK_BYTES and len(offsets) < _MAX_MATCHES:
                offsets.append(offset + at)
                at = chunk.find(pattern, at + 1)
    return {pattern.decode(): offsets for pattern, offsets in found.items()}
