"""A pickle reader for bytes from someone else's checkpoint: data only, bounded, no side effects.

A pickle is a small program. `find_class` allow-lists alone stop it from running code, but
not from (a) mutating what it is allowed to name: BUILD on an admitted object writes into
its `__dict__`, so a `.metadata` that BUILDs `torch.float32`'s stand-in rewrites the
process-wide dtype table for everything read afterwards; (b) making the reader allocate
without bound: 40 MB of EMPTY_DICT opcodes is 40 million dicts (~2.9 GB), the C
unpickler sizes its memo array by the largest index a PUT names, and a constructor called
a million times on one memoized argument copies it a million times.

`RestrictedUnpickler` is the pure-Python unpickler with a fixed opcode table and a memo
that is a list, grown an entry at a time. On top of the allow-list of globals it:

* charges every opcode the memory it can retain (`OPCODE_COST`, plus per item where one
  opcode fills a container or calls a constructor) and refuses past a budget that grows
  with the input (`memory_budget`): memory stays proportional to the file on disk;
* lets BUILD, SETITEM(S) and APPEND(S) touch only objects this pickle created itself
  (records made by NEWOBJ/REDUCE of an admitted record class, each BUILT once with only
  its declared fields; dicts and lists, which no admitted global is);
* hashes only flat keys (scalars, short tuples of scalars, records holding those), and
  calls admitted constructors only with flat arguments, so nothing nested a million deep
  is hashed (the C stack) and a constructor's work is paid by what it is given;
* builds sets and frozensets (protocol 4's EMPTY_SET, ADDITEMS, FROZENSET) of flat keys
  only, as SETITEM hashes them, filling only a set this pickle created;
* refuses every other opcode (extensions, protocol-0 class instantiation, out-of-band
  buffers), and persistent ids unless the caller asks for them;
* with a `placeholders` policy, turns a global outside the allow-list into a
  `Placeholder` (its name, never imported) and a call or NEWOBJ of one into a
  `PlaceholderCall` (the name, the arguments and any BUILD state, kept as data): a
  pickled argparse.Namespace holds enums, dtypes and partials of code this process does
  not have and must not import, yet its plain fields are what a reader wants.

Errors are `PickleRefused` with one line; callers add the file name.
"""

from __future__ import annotations

import dataclasses
import gc
import io
import pickle
import pickletools
import struct
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, BinaryIO, ClassVar, cast

from mfsdp_ckpt.check.printable import cut_to, error_line
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory

# ------------------------------------------------------------------ the memory budget
# What one opcode can leave allocated, in bytes: the worst measured on CPython 3.11, 64-bit,
# flooding it in a fresh process (scripts/pickle_budget.py: RSS growth and tracemalloc's
# peak per opcode; dict-like floods stop just past a resize, the table's worst fill).
SLOT = 16  # a reference on the stack, in a list or in the memo (a list: see _put): 8 B + 1/8
NUMBER = 48  # an int of up to 8 bytes (longer: its digits are the input's own bytes), a float
TEXT = 72  # a str or bytes object's header (its characters are the input's own bytes)
CONTAINER = 80  # an empty dict or list, the new stack a MARK opens, a tuple's header
ENTRY = 96  # a dict entry at the dict's worst fill: SETITEM, and DICT/SETITEMS per pair
ORDERED_ENTRY = 160  # the same in an OrderedDict (a linked node per entry too)
SET = 240  # an empty set or frozenset: its first table of 8 slots is inline (~235 B)
SET_ENTRY = 160  # an item of a set or frozenset just past a resize, its int too (~174 B)
RECORD = 224  # a record or placeholder call NEWOBJ makes, with its freshness entry
CALL = 256  # what an admitted call (REDUCE) makes: a record of 5 fields, a Path, a dict, ...
FIELDS = 128  # the fields a BUILD gives a record
GLOBAL = 256  # a Placeholder for a global outside the allow-list, with its two names
MINIMUM = 8  # POP, PROTO, FRAME, ...: no opcode is free, so time is bounded by memory too
# An admitted call may copy its arguments (torch.Size its dimensions, Path its parts): per
# scalar argument or item of a container one, and per character (Path interns new parts).
ARGUMENT_ITEM = 16
ARGUMENT_CHAR = 80
# Text decodes to at most 4 bytes per input byte (a str holding one non-BMP character is
# UCS-4 throughout): that much of the budget is set aside for the input's own characters.
TEXT_PER_BYTE = 4
# A real DCP .metadata is charged 37-42 bytes per byte of the file, whatever its shape
# (scripts/pickle_budget.py; it holds ~11 per byte once read: bench/dcp_metadata_read.py).
# The budget allows BUDGET_PER_BYTE, and never less than MIN_BUDGET: any real .metadata is
# read, at any size, while a flood of the opcodes that make an object of one byte (~72 B
# retained, 84 charged) is refused at the budget, which it cannot outgrow.
BUDGET_PER_BYTE = 64
MIN_BUDGET = 1 << 30
# torch's weights-only unpickler, which loads blob pickles after check_pickle_budget, keeps
# its memo in a dict (an entry and its int key) and rebuilds a tensor per call it is given.
TORCH_MEMO_ENTRY = 128
TORCH_CALL = 768
MAX_KEY_ITEMS = 64  # a dict key tuple (a MetadataIndex offset: one int per dimension)
MAX_HASH_INT = 2**61 - 1  # CPython's int hash modulus: below it an int hashes to itself
MAX_GLOBAL_NAME = 1024  # characters of a placeholder global's module and name

_COSTS: dict[str, int] = {
    **dict.fromkeys(("NONE", "NEWTRUE", "NEWFALSE", "BININT1", "EMPTY_TUPLE", "DUP"), SLOT),
    **dict.fromkeys(("GET", "BINGET", "LONG_BINGET", "PUT", "BINPUT", "LONG_BINPUT"), SLOT),
    **dict.fromkeys(("MEMOIZE", "BINPERSID", "LIST", "APPEND", "APPENDS", "SETITEMS"), SLOT),
    **dict.fromkeys(("INT", "BININT", "BININT2", "LONG", "LONG1", "FLOAT", "BINFLOAT"), NUMBER),
    **dict.fromkeys(("UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"), TEXT),
    **dict.fromkeys(("BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"), TEXT),
    **dict.fromkeys(("EMPTY_SET", "FROZENSET"), SET),
    "ADDITEMS": SLOT,
    **dict.fromkeys(
        ("EMPTY_LIST", "EMPTY_DICT", "MARK", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "DICT"),
        CONTAINER,
    ),
    "SETITEM": ENTRY,
    "NEWOBJ": RECORD,
    "REDUCE": CALL,
    "BUILD": FIELDS,
    "GLOBAL": GLOBAL,
    "STACK_GLOBAL": GLOBAL,
}
_TORCH_COSTS = {
    **_COSTS,
    **dict.fromkeys(("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"), TORCH_MEMO_ENTRY),
    "REDUCE": TORCH_CALL,
}


# Budget bytes charged between two progress reports (a pickle is charged several bytes per
# byte of file: a report every few MB of a large one); the check rides on the budget's own,
# so a load without progress pays nothing for it.
PROGRESS_EVERY = 1 << 26
Progress = Callable[[int, int], None]  # (bytes of the pickle read, its size)


# What the error of a damaged pickle or blob (pickle's, zipfile's own) adds to its line, by
# `error_line`: type and gist, escaped, with a marked cut; the file it names leads the line.
DETAIL_CHARS = 120


def memory_budget(size: int) -> int:
    """The bytes a pickle of `size` bytes may retain: BUDGET_PER_BYTE per byte, at least
    MIN_BUDGET."""
    return max(MIN_BUDGET, BUDGET_PER_BYTE * size)


def _over_budget(budget: int, size: int) -> str:
    limit = f"{budget >> 20:,} MiB" if budget >= 1 << 20 else f"{budget >> 10:,} KiB"
    return f"the pickle would retain more than {limit}, the limit for a pickle of {size:,} bytes"


_SCALARS = (str, int, float, bool, bytes, type(None))


class PickleRefused(MfsdpFailedError, pickle.UnpicklingError):
    """The pickle does something a data-only checkpoint pickle never does, or is too large."""


def _opcode(name: str) -> int:
    return next(op.code for op in pickletools.opcodes if op.name == name).encode("latin-1")[0]


# Opcodes that only push plain values or reshape the stack: taken as the stdlib implements them.
_PLAIN_OPS = (
    "PROTO",
    "STOP",
    "MARK",
    "POP",
    "POP_MARK",
    "DUP",
    "NONE",
    "NEWTRUE",
    "NEWFALSE",
    "INT",
    "BININT",
    "BININT1",
    "BININT2",
    "LONG",
    "LONG1",
    "FLOAT",
    "BINFLOAT",
    "UNICODE",
    "BINUNICODE",
    "SHORT_BINUNICODE",
    "BINUNICODE8",
    "BINBYTES",
    "SHORT_BINBYTES",
    "BINBYTES8",
    "EMPTY_TUPLE",
    "TUPLE",
    "TUPLE1",
    "TUPLE2",
    "TUPLE3",
    "EMPTY_LIST",
    "LIST",
    "EMPTY_DICT",
    "EMPTY_SET",
    "GLOBAL",
    "STACK_GLOBAL",
)

# A file is read into a window of WINDOW bytes; while more follows, the loop stops
# WINDOW_SLACK bytes before the window's end (an inline opcode's longest argument: a short
# string's length byte and 255 bytes), so an inline opcode's argument is always in it.
WINDOW = 1 << 20
WINDOW_SLACK = 512


@dataclasses.dataclass(frozen=True)
class Placeholder:
    """A global the pickle names that is not admitted: its name, never imported. `lookup`:
    an enum class whose only admitted call is a member's lookup by one int (what pickle
    writes for an IntEnum member), its member never written into."""

    module: str
    name: str
    lookup: bool = False

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


class PlaceholderCall:
    """What calling a Placeholder would have built (an Enum member, a partial, an object):
    the callee's name, its arguments and the state a BUILD gave it, all inert data."""

    def __init__(self, target: Placeholder, args: tuple):
        self.target, self.args, self.state = target, args, None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __repr__(self) -> str:
        return f"<{self.target.qualname}{cut_to(repr(self.args), 60)}>"


PlaceholderPolicy = Callable[[str, str], Placeholder]


def is_flat(value: Any) -> bool:
    """A scalar, or a tuple/list of scalars: safe to hash, compare and print."""
    if isinstance(value, _SCALARS):
        return True
    return isinstance(value, (tuple, list)) and all(isinstance(v, _SCALARS) for v in value)


def _short_flat_tuple(value: Any) -> bool:
    """Hashing it is cheap: the dict keys a checkpoint has are names and MetadataIndex
    offsets (one int per dimension), and a key hashed once per SETITEM must not be a
    memoized tuple of a million ints."""
    return isinstance(value, tuple) and len(value) <= MAX_KEY_ITEMS and is_flat(value)


def _hashable_key(value: Any) -> bool:
    """A key SETITEM may hash: plain data, cheap to hash, and one whose hash an input
    cannot make collide with other keys' (`_collision_free`). A str, what nearly every key
    of a checkpoint is (names, a record's field names), is all of those: decided first."""
    if type(value) is str:
        return True
    if isinstance(value, (tuple, list)):
        return _short_flat_tuple(value) and _collision_free(tuple(value))
    if isinstance(value, _SCALARS):
        return _collision_free((value,))
    state = getattr(value, "__dict__", None)
    if not (dataclasses.is_dataclass(value) and isinstance(state, dict)):
        return False
    leaves: list = []  # a record's fields, its tuples' items in their place
    for field in state.values():
        if isinstance(field, tuple):
            if not _short_flat_tuple(field):
                return False
            leaves += field
        elif isinstance(field, _SCALARS):
            leaves.append(field)
        else:
            return False
    return _collision_free(tuple(leaves))


def _collision_free(leaves: tuple) -> bool:
    """Keys of equal hash make every dict insert probe all of them: ints that differ by
    multiples of 2**61 - 1 share one hash, and inserting N of them takes time in N**2. str and
    bytes hash with the process's random seed, so no set of colliding ones can be written
    ahead; an int below 2**61 - 1 hashes to itself (distinct keys, distinct hashes), and a
    key of one such number is then collision-free. A key made of several numbers alone (an
    int tuple, a record of ints) has a hash anyone can solve for, so it needs a str or
    bytes among them; real checkpoints key by names, small ints and MetadataIndex (an fqn
    string with its offsets)."""
    texts = 0
    for leaf in leaves:
        if isinstance(leaf, (str, bytes)):
            texts += 1
        elif isinstance(leaf, int) and not -MAX_HASH_INT < leaf < MAX_HASH_INT:
            return False
    return texts > 0 or len(leaves) <= 1


def _check_table(allowed: dict[tuple[str, str], object]) -> None:
    """Dicts, lists and sets on the stack are then always this pickle's own (EMPTY_DICT,
    LIST, EMPTY_SET, ...; no admitted constructor returns a shared one), so SETITEM, APPEND
    and ADDITEMS need no bookkeeping per container, which would double the memory of a
    flood of them."""
    if any(isinstance(value, (dict, list, set)) for value in allowed.values()):
        raise TypeError("a class table may not admit a dict, list or set object")


class RestrictedUnpickler(pickle._Unpickler):
    """Unpickles `data` into fresh objects built only from `allowed`, retaining at most
    `budget` bytes; by default `memory_budget` of the bytes read so far, checked as it
    reads, so that bytes after the pickle's STOP (which no unpickler reads) buy it nothing.

    `data` is bytes, or a binary file of `size` bytes read from its start: then only the
    pickle's own bytes are read, whatever follows its STOP never (`consumed`: where it
    ended), and no opcode's declared length makes a read larger than what the file has.

    `allowed` maps (module, name) to what that global resolves to. `records` are the
    classes whose instances the pickle may create and fill (BUILD) once each.
    `persistent_load`, when given, resolves persistent ids (torch.save's storages).
    `progress`, when given, gets (bytes read, size) at the start, every PROGRESS_EVERY
    bytes of budget charged and at the end: a pickle of millions of entries takes minutes.
    After `load`, `charged` is what the pickle was charged (the part of the budget it used)
    and `budget` the limit it was held to.
    """

    dispatch: ClassVar[dict[int, Callable]] = {}
    # Set up by pickle._Unpickler.load(); typeshed does not declare them.
    stack: list[Any]
    memo: list[Any]  # a list, not the stdlib's dict: see _put
    append: Callable[[Any], None]
    pop_mark: Callable[[], list[Any]]

    def __init__(
        self,
        data: bytes | BinaryIO,
        allowed: dict[tuple[str, str], object],
        records: tuple[type, ...],
        *,
        budget: int | None = None,
        persistent_load: Callable[[Any], Any] | None = None,
        placeholders: PlaceholderPolicy | None = None,
        progress: Progress | None = None,
        size: int | None = None,
    ):
        if isinstance(data, (bytes, bytearray)):
            # the whole pickle is one window, read in place
            self._stream: Any = None
            self._buf, self.size = bytes(data), len(data)
        elif size is None:
            raise TypeError("a file to unpickle needs its size")
        else:
            self._stream, self.size, self._buf = data, size, b""
        self._more = self._stream is not None  # the file may hold bytes past the window
        self._base = self._pos = 0  # the window's offset in the pickle; the next byte's in it
        self._progress = progress
        super().__init__(io.BytesIO())  # never read: `load` reads the window
        _check_table(allowed)
        if placeholders is not None:
            records = (*records, PlaceholderCall)
        self.allowed, self.records = allowed, records
        self._record_set = frozenset(records)
        self._grows = budget is None  # with the bytes read: see _allowance
        self.budget = memory_budget(0) if budget is None else budget
        self.charged = self.consumed = 0
        self._placeholders = placeholders
        self._admitted: dict[int, Any] = {id(v): v for v in allowed.values()}
        # record class -> the fields a BUILD may fill, for those that set no state of their own
        self._fields = {cls: _build_plan(cls)[1] for cls in records if not _build_plan(cls)[0]}
        # id -> a record this pickle created and has not BUILT yet (kept alive: ids stay unique)
        self._fresh: dict[int, Any] = {}
        self._persistent = persistent_load

    def find_class(self, module: str, name: str) -> object:
        try:
            return self.allowed[(module, name)]
        except (KeyError, TypeError):
            if self._placeholders is not None and isinstance(module, str):
                if len(module) + len(name) > MAX_GLOBAL_NAME:
                    raise PickleRefused(
                        f"a global named by more than {MAX_GLOBAL_NAME} characters"
                    ) from None
                return self._placeholders(module, name)  # the policy may refuse it
            raise PickleRefused(
                f"refusing to load global {module}.{name}: not an admitted type"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        if self._persistent is None or not isinstance(pid, tuple):
            raise PickleRefused("refusing a persistent id: this pickle may not reference storages")
        return self._persistent(pid)

    def load(self) -> Any:
        """The stdlib loop over a window of the pickle's bytes (FRAME is only a buffering
        hint, so no unframer), charging each opcode inline. The opcodes a DCP `.metadata`
        is made of (the memo's, half of it; records, their fields, small ints and names)
        run inline: an index into the window, no call. The rest are the stdlib's handlers
        or the guarded ones below, reading through `_read`. A handler whose opcode retains
        more than its table cost (per item it stores or argument it passes) returns the
        excess, charged before the next opcode.

        A window ends WINDOW_SLACK bytes early while the file has more: an inline opcode's
        argument (at most a short string's 256 bytes) is then always in it, and at the
        pickle's true end an argument cut short reads short, as a file's read does."""
        self.read, self.readline = self._read, self._readline
        self.metastack: list[list[Any]] = []
        stack: list[Any] = []
        self.stack, self.proto, self.memo = stack, 0, []
        append = self.append = stack.append
        metastack, memo, fresh, fields = self.metastack, self.memo, self._fresh, self._fields
        dispatch, cost, reads = self.dispatch, OPCODE_COST, _READS_ARGUMENT
        buf, pos, end = self._buf, 0, self._window_end()
        seen = 0 if self._grows else self.size  # the bytes `left` was last worked out for
        left = self._allowance(seen)
        # `left` below `floor`: over budget (floor 0), or time for a progress report
        floor = 0 if self._progress is None else self._report(left, 0)
        # No collection while it reads: what it builds is all still held (stack, memo), so
        # each pass the cycle collector makes over millions of new objects frees nothing;
        # what it may allocate is bounded by the budget, not by collection.
        collecting = gc.isenabled()
        gc.disable()
        try:
            while True:
                if pos >= end:
                    buf, pos, end = self._next_window(pos)
                code = buf[pos]
                pos += 1
                left -= cost[code]
                if left < floor:
                    if left < 0 and self._grows:
                        now = self._base + pos
                        left, seen = left + self._allowance(now) - self._allowance(seen), now
                    if left < 0:
                        raise PickleRefused(_over_budget(self._limit(seen), seen))
                    # after a growth too: `left` grew past a floor of 0, which alone
                    # would hold the next report back until the budget ran out again
                    if self._progress is not None:
                        floor = self._report(left, self._base + pos)
                if code == _LONG_BINGET:
                    index = int.from_bytes(buf[pos : pos + 4], "little")
                    pos += 4
                    if index >= len(memo):  # never negative: unsigned
                        raise pickle.UnpicklingError(f"Memo value not found at index {index}")
                    append(memo[index])
                elif code == _MEMOIZE:
                    memo.append(stack[-1])
                elif code == _EMPTY_TUPLE:
                    append(())
                elif code == _MARK:
                    metastack.append(stack)
                    stack = self.stack = []
                    append = self.append = stack.append
                elif code == _BINGET:
                    index = int.from_bytes(buf[pos : pos + 1], "little")
                    pos += 1
                    if index >= len(memo):
                        raise pickle.UnpicklingError(f"Memo value not found at index {index}")
                    append(memo[index])
                elif code == _NEWOBJ:
                    args, cls = stack.pop(), stack.pop()
                    if isinstance(cls, type) and cls in fields and args == ():  # a record
                        obj = cast(Any, cls).__new__(cls)  # mypy: `type.__new__`
                        fresh[id(obj)] = obj
                        append(obj)
                    else:
                        append(self._newobj(cls, args))
                elif code == _BUILD:
                    state = stack.pop()
                    inst = stack[-1]
                    names = fields.get(type(inst))
                    if names is None:
                        self._build(inst, state)
                    elif fresh.pop(id(inst), None) is not inst:
                        raise PickleRefused(_not_fresh(inst))
                    else:
                        _fill_fields(inst, state, names)
                elif code == _SETITEMS:
                    items = stack
                    stack = self.stack = metastack.pop()
                    append = self.append = stack.append
                    left -= self._set_items(stack[-1], items)
                elif code == _EMPTY_DICT:
                    append({})
                elif code == _BININT1:
                    append(buf[pos])
                    pos += 1
                elif code == _SHORT_BINUNICODE:
                    count = buf[pos]
                    append(str(buf[pos + 1 : pos + 1 + count], "utf-8", "surrogatepass"))
                    pos += 1 + count
                elif code == _TUPLE:
                    items = stack
                    stack = self.stack = metastack.pop()
                    append = self.append = stack.append
                    append(tuple(items))
                elif code == _BININT2:
                    append(_UINT16(buf[pos : pos + 2])[0])
                    pos += 2
                elif code == _BININT:
                    append(_INT32(buf[pos : pos + 4])[0])
                    pos += 4
                elif code == _NONE:
                    append(None)
                elif code == _TUPLE1:
                    stack[-1] = (stack[-1],)
                elif code == _TUPLE2:
                    stack[-2:] = [(stack[-2], stack[-1])]
                elif code == _BINPUT:
                    self._put(buf[pos])
                    pos += 1
                elif code == _FRAME:
                    pos += 8  # the frame's length: its bytes follow in the same stream
                else:
                    self._pos = pos  # where a handler's `_read` of its argument starts
                    excess = dispatch[code](self)
                    if reads[code]:  # it may have moved the window on
                        buf, pos, end = self._buf, self._pos, self._window_end()
                    stack, append = self.stack, self.append  # a mark it pushed or popped
                    if excess:
                        left -= excess
        except pickle._Stop as stop:  # type: ignore[attr-defined]
            self.consumed = self._base + pos
            if self._grows:
                left, seen = (
                    left + self._allowance(self.consumed) - self._allowance(seen),
                    self.consumed,
                )
                if left < 0:  # its characters' share, set aside as they were read, tipped it
                    raise PickleRefused(_over_budget(self._limit(seen), seen)) from None
            if self._progress is not None:
                self._progress(self.size, self.size)
            return stop.value
        finally:
            if collecting:
                gc.enable()
            # `read` and `readline`, bound to this unpickler, make it a cycle: without them
            # it (its memo and window too) is freed as its caller lets go, not at whatever
            # collection comes next (a reader holds the collector off while it parses)
            del self.read, self.readline
            self.budget = self._limit(seen)
            self.charged = self.budget - left

    # ------------------------------------------------------------------ the window
    # A file is read WINDOW bytes at a time into `_buf` (bytes given are one window): the
    # loop indexes it, where a file's read(1) per opcode cost a C call each.
    def _window_end(self) -> int:
        """Where the loop must stop indexing the window: WINDOW_SLACK before its end while
        the file has more, its end once the file has none."""
        return len(self._buf) - WINDOW_SLACK if self._more else len(self._buf)

    def _next_window(self, pos: int) -> tuple[bytes, int, int]:
        """The window moved on to start at `pos` (buf, pos, end for the loop); EOFError
        when the pickle's bytes end there."""
        self._pos = pos
        while self._more and pos >= self._window_end():
            self._fill(len(self._buf) - pos + WINDOW)
            pos = self._pos
        if pos >= len(self._buf):
            raise EOFError
        return self._buf, pos, self._window_end()

    def _fill(self, want: int) -> None:
        """Read until the window holds `want` bytes from `_pos`, or the file ends, WINDOW
        bytes at a time at least; a declared length past that reads no more than the file
        has left (a file's read allocates the length asked for first: BINUNICODE8 may
        declare 2**62)."""
        kept = self._buf[self._pos :]
        self._base += self._pos
        self._pos = 0
        need = want - len(kept)
        if need > WINDOW:
            need = max(WINDOW, min(need, self.size - self._base - len(kept)))
        parts = [kept]
        while need > 0:
            chunk = self._stream.read(max(need, WINDOW))
            if not chunk:
                self._more = False
                break
            parts.append(chunk)
            need -= len(chunk)
        self._buf = b"".join(parts)

    def _read(self, count: int) -> bytes:
        """`count` bytes of an opcode's argument, or what is left of the pickle."""
        if self._pos + count > len(self._buf) and self._more:
            self._fill(count)
        start = self._pos
        data = self._buf[start : start + count]
        self._pos = start + len(data)
        return data

    def _readline(self) -> bytes:
        """An opcode's argument up to and with its newline, or what is left of the pickle."""
        while (found := self._buf.find(b"\n", self._pos)) < 0 and self._more:
            self._fill(len(self._buf) - self._pos + WINDOW)
        return self._read(len(self._buf) - self._pos if found < 0 else found + 1 - self._pos)

    def _limit(self, read: int) -> int:
        """The budget once `read` bytes of the pickle are read."""
        return memory_budget(read) if self._grows else self.budget

    def _allowance(self, read: int) -> int:
        """What the opcodes of the first `read` bytes may be charged: the budget less what
        those bytes' own characters may take (TEXT_PER_BYTE each); without a given budget
        it is worked out again, for the bytes read by then, each time it runs out."""
        return self._limit(read) - TEXT_PER_BYTE * read

    def _report(self, left: int, read: int) -> int:
        """Report the `read` bytes read so far; the budget left at which to report next."""
        assert self._progress is not None
        self._progress(read, self.size)
        return max(0, left - PROGRESS_EVERY)

    # ------------------------------------------------------------------ the memo, a list
    # Picklers number memo entries in order (PUT n where n is the count so far; MEMOIZE
    # implies it), so the memo is a list: a slot per entry, where a dict keyed by int takes
    # ~120 bytes at its worst fill (a real .metadata memoizes ~16 objects per chunk).
    # Overwriting an entry is allowed; skipping ahead is not.
    def _put(self, index: int) -> None:
        memo = self.memo
        if index == len(memo):
            memo.append(self.stack[-1])
        elif 0 <= index < len(memo):
            memo[index] = self.stack[-1]
        else:
            raise PickleRefused(f"memo index {index} skips past the {len(memo)} entries so far")

    def _get(self, index: int) -> None:
        if not 0 <= index < len(self.memo):
            raise pickle.UnpicklingError(f"Memo value not found at index {index}")
        self.append(self.memo[index])

    def _load_put(self) -> None:
        self._put(int(self.readline()[:-1]))

    def _load_binput(self) -> None:
        self._put(self.read(1)[0])

    def _load_long_binput(self) -> None:
        self._put(int.from_bytes(self.read(4), "little"))

    def _load_get(self) -> None:
        self._get(int(self.readline()[:-1]))

    # ------------------------------------------------------------------ guarded opcodes
    def _set_items(self, target: Any, items: list) -> int:
        """Store key/value pairs; the bytes their entries may take."""
        if type(target) not in (dict, OrderedDict):  # never shared: see _check_table
            raise PickleRefused(f"SETITEM on a {type(target).__name__}")
        if len(items) % 2:
            raise PickleRefused("SETITEMS with an odd number of items")
        keys = items[::2]
        if set(map(type, keys)) <= _STR_ONLY:  # names: nearly every key a checkpoint has
            target.update(zip(keys, items[1::2]))
            return (ENTRY if type(target) is dict else ORDERED_ENTRY) * len(keys)
        for i in range(0, len(items), 2):
            if not _hashable_key(items[i]):
                raise PickleRefused(
                    f"dict key of type {type(items[i]).__name__} is not plain data, or could"
                    " share its hash with other keys"
                )
            target[items[i]] = items[i + 1]
        return (ENTRY if type(target) is dict else ORDERED_ENTRY) * (len(items) // 2)

    def _load_dict(self) -> int:
        items = self.pop_mark()
        target: dict = {}
        excess = self._set_items(target, items)
        self.append(target)
        return excess

    def _load_setitem(self) -> int:
        value, key = self.stack.pop(), self.stack.pop()
        return self._set_items(self.stack[-1], [key, value]) - ENTRY  # ENTRY: the table's

    def _load_setitems(self) -> int:
        items = self.pop_mark()
        return self._set_items(self.stack[-1], items)

    def _extend(self, target: Any, items: list) -> None:
        if type(target) is not list:  # never shared: see _check_table
            raise PickleRefused(f"APPEND to a {type(target).__name__}")
        target.extend(items)

    def _load_append(self) -> None:
        value = self.stack.pop()
        self._extend(self.stack[-1], [value])

    def _load_appends(self) -> None:
        items = self.pop_mark()
        self._extend(self.stack[-1], items)

    def _placeholder_call(self, target: Placeholder, args: Any) -> PlaceholderCall:
        if not isinstance(args, tuple):
            raise PickleRefused("constructor arguments are not a tuple")
        result = PlaceholderCall(target, args)  # holds the arguments, copies nothing
        if target.lookup:  # a member: never fresh, so no BUILD writes into it
            if len(args) != 1 or type(args[0]) is not int:
                raise PickleRefused(
                    f"refusing {target.qualname} called with {cut_to(repr(args), 40)}: only its"
                    " member lookup by one int is read"
                )
            return result
        self._fresh[id(result)] = result
        return result

    def _is_leaf(self, value: Any) -> bool:
        return type(value) in _SCALARS or self._admitted.get(id(value)) is value

    def _argument_bytes(self, args: tuple) -> int:
        """What an admitted call may copy from its arguments (torch.Size its dimensions,
        Path its parts): ARGUMENT_ITEM per scalar argument or item of a container one,
        ARGUMENT_CHAR per character. Deeper than that is refused, so a callee never hashes
        or walks anything nested (an Enum hashes its argument: a million nested tuples
        overflow the C stack)."""
        charged = 0
        for arg in args:
            if isinstance(arg, dict):
                parts: Any = [part for pair in arg.items() for part in pair]
            elif isinstance(arg, (tuple, list)):
                parts = arg
            else:
                parts = (arg,)
            charged += ARGUMENT_ITEM * len(parts)
            for part in parts:
                if not self._is_leaf(part):
                    raise PickleRefused(f"a constructor argument holds a {type(part).__name__}")
                if isinstance(part, (str, bytes)):
                    charged += ARGUMENT_CHAR * len(part)
        return charged

    def _call(self, func: Any, args: Any) -> tuple[Any, int]:
        """What calling `func` builds, and the bytes it may retain beyond REDUCE's cost."""
        if isinstance(func, Placeholder):  # never called: only recorded
            return self._placeholder_call(func, args), 0
        admitted = self._admitted.get(id(func))
        if admitted is None or admitted is not func or not callable(admitted):
            raise PickleRefused(
                f"refusing to call {type(func).__name__}: not an admitted constructor"
            )
        if not isinstance(args, tuple):
            raise PickleRefused("constructor arguments are not a tuple")
        if isinstance(func, type) and issubclass(func, dict):
            if args:  # items arrive by SETITEMS, where keys are checked before hashing
                raise PickleRefused(f"{func.__name__} built with arguments")
            return func(), 0
        excess = self._argument_bytes(args)
        result = admitted(*args)
        if isinstance(func, type) and func in self._record_set:
            self._fresh[id(result)] = result
        return result, excess

    def _load_reduce(self) -> int:
        args = self.stack.pop()
        self.stack[-1], excess = self._call(self.stack[-1], args)
        return excess

    def _newobj(self, cls: Any, args: Any) -> Any:
        """NEWOBJ of what `load` does not build inline: a placeholder's call, a record that
        sets its own state, or a refusal."""
        if isinstance(cls, Placeholder):
            return self._placeholder_call(cls, args)
        if not (isinstance(cls, type) and cls in self._record_set) or args != ():
            raise PickleRefused(
                f"NEWOBJ of {getattr(cls, '__name__', type(cls).__name__)} is not admitted"
            )
        record: Any = cls  # a record class; mypy would resolve `__new__` on `type` itself
        obj = record.__new__(record)
        self._fresh[id(obj)] = obj
        return obj

    def _build(self, inst: Any, state: Any) -> None:
        """BUILD of what `load` does not fill inline: a record that sets its own state, or
        a refusal."""
        cls = type(inst)
        if cls not in self._record_set or self._fresh.pop(id(inst), None) is not inst:
            raise PickleRefused(_not_fresh(inst))
        own_setstate, names = _build_plan(cls)
        if own_setstate:
            inst.__setstate__(state)
            return
        _fill_fields(inst, state, names)

    def _set_members(self, items: list) -> list:
        """`items` for a set, each a key SETITEM could hash (`_hashable_key`)."""
        for item in items:
            if type(item) is list or not _hashable_key(item):
                raise PickleRefused(
                    f"set item of type {type(item).__name__} is not plain data, or could"
                    " share its hash with other items"
                )
        return items

    def _load_additems(self) -> int:
        items = self.pop_mark()
        target = self.stack[-1]
        if type(target) is not set:  # never shared: see _check_table
            raise PickleRefused(f"ADDITEMS to a {type(target).__name__}")
        target.update(self._set_members(items))
        return SET_ENTRY * len(items)

    def _load_frozenset(self) -> int:
        items = self.pop_mark()
        self.append(frozenset(self._set_members(items)))
        return SET_ENTRY * len(items)

    def _load_bytearray8(self) -> None:
        """An in-band buffer (numpy's protocol-5 array data): the stdlib's handler reads
        into the file it was given, not the window."""
        (count,) = struct.unpack("<Q", self._read(8))
        data = self._read(count)
        if len(data) < count:
            raise pickle.UnpicklingError("pickle data was truncated")
        self.append(bytearray(data))

    def _load_long4(self) -> None:
        raise PickleRefused("LONG4: an integer of more than 255 bytes is not checkpoint data")

    def _load_persid(self) -> None:
        self.stack[-1] = self.persistent_load(self.stack[-1])


def _not_fresh(inst: Any) -> str:
    return f"BUILD on a {type(inst).__name__} this pickle did not just create"


def _fill_fields(inst: Any, state: Any, names: frozenset[str]) -> None:
    """BUILD of a record this pickle just created: `state` (a dict, or pickle's (dict,
    None) of a class with no slots) names only fields the record has."""
    if isinstance(state, tuple) and len(state) == 2 and state[1] is None:
        state = state[0]
    # keys that are all field names are all str: a field name equals no other type
    if not isinstance(state, dict) or not names.issuperset(state):
        raise PickleRefused(f"BUILD of {type(inst).__name__} with fields it does not have")
    for key, value in state.items():
        object.__setattr__(inst, key, value)


_BUILD_PLANS: dict[type, tuple[bool, frozenset[str]]] = {}


def _build_plan(cls: type) -> tuple[bool, frozenset[str]]:
    """Whether a record class sets its own state, and else the fields a BUILD may fill
    (worked out once per class: a large .metadata BUILDs hundreds of thousands)."""
    if cls in _BUILD_PLANS:
        return _BUILD_PLANS[cls]
    own = "__setstate__" in vars(cls) or any("__setstate__" in vars(c) for c in cls.__mro__[1:-1])
    names = (
        frozenset(f.name for f in dataclasses.fields(cls))
        if dataclasses.is_dataclass(cls)
        else frozenset()
    )
    _BUILD_PLANS[cls] = (own, names)
    return own, names


def _refuse(code: int) -> Callable:
    name = next(
        (op.name for op in pickletools.opcodes if op.code.encode("latin-1")[0] == code), None
    )

    def refuse(self: RestrictedUnpickler) -> None:
        raise PickleRefused(f"opcode {name or hex(code)} is not admitted in checkpoint pickles")

    return refuse


def _dispatch_table() -> dict[int, Callable]:
    base = pickle._Unpickler.dispatch
    own = RestrictedUnpickler
    handlers: dict[int, Callable] = {_opcode(name): base[_opcode(name)] for name in _PLAIN_OPS}
    handlers.update(
        {
            _opcode("DICT"): own._load_dict,
            _opcode("SETITEM"): own._load_setitem,
            _opcode("SETITEMS"): own._load_setitems,
            _opcode("APPEND"): own._load_append,
            _opcode("APPENDS"): own._load_appends,
            _opcode("REDUCE"): own._load_reduce,
            _opcode("BINPERSID"): own._load_persid,
            _opcode("LONG4"): own._load_long4,
            _opcode("ADDITEMS"): own._load_additems,
            _opcode("FROZENSET"): own._load_frozenset,
            _opcode("BYTEARRAY8"): own._load_bytearray8,
            _opcode("PUT"): own._load_put,
            _opcode("BINPUT"): own._load_binput,
            _opcode("LONG_BINPUT"): own._load_long_binput,
            _opcode("GET"): own._load_get,
        }
    )
    for name in _INLINE_OPS:  # run by `load` itself: never dispatched
        handlers[_opcode(name)] = _refuse(_opcode(name))
    return {code: handlers[code] if code in handlers else _refuse(code) for code in range(256)}


def _cost_table(by_name: dict[str, int]) -> list[int]:
    """Costs by opcode byte; the rest cost MINIMUM (refused opcodes too)."""
    costs = [MINIMUM] * 256
    for name, cost in by_name.items():
        costs[_opcode(name)] = cost
    return costs


# Opcodes `load` runs itself, most frequent first (as a DCP .metadata holds them).
_INLINE_OPS = (
    "LONG_BINGET",
    "MEMOIZE",
    "EMPTY_TUPLE",
    "MARK",
    "BINGET",
    "NEWOBJ",
    "BUILD",
    "SETITEMS",
    "EMPTY_DICT",
    "BININT1",
    "SHORT_BINUNICODE",
    "TUPLE",
    "BININT2",
    "BININT",
    "NONE",
    "TUPLE1",
    "TUPLE2",
    "BINPUT",
    "FRAME",
)
(
    _LONG_BINGET,
    _MEMOIZE,
    _EMPTY_TUPLE,
    _MARK,
    _BINGET,
    _NEWOBJ,
    _BUILD,
    _SETITEMS,
    _EMPTY_DICT,
    _BININT1,
    _SHORT_BINUNICODE,
    _TUPLE,
    _BININT2,
    _BININT,
    _NONE,
    _TUPLE1,
    _TUPLE2,
    _BINPUT,
    _FRAME,
) = (_opcode(name) for name in _INLINE_OPS)
# Opcodes whose handler reads an argument (through `_read`, `_readline`), by byte.
_READS_ARGUMENT = [False] * 256
for _op in pickletools.opcodes:
    _READS_ARGUMENT[_opcode(_op.name)] = _op.arg is not None
_UINT16, _INT32 = struct.Struct("<H").unpack, struct.Struct("<i").unpack
_STR_ONLY = frozenset((str,))
RestrictedUnpickler.dispatch = _dispatch_table()
OPCODE_COST = _cost_table(_COSTS)
_TORCH_OPCODE_COST = _cost_table(_TORCH_COSTS)


def restricted_loads(
    data: bytes,
    allowed: dict[tuple[str, str], object],
    records: tuple[type, ...] = (),
    *,
    budget: int | None = None,
    persistent_load: Callable[[Any], Any] | None = None,
    placeholders: PlaceholderPolicy | None = None,
    progress: Progress | None = None,
) -> Any:
    """The object in `data`, or PickleRefused (policy, budget) / another exception (damaged
    bytes). `budget`: the bytes it may retain, `memory_budget` of the bytes read so far
    unless given; `progress` as RestrictedUnpickler's."""
    return RestrictedUnpickler(
        data,
        allowed,
        records,
        budget=budget,
        persistent_load=persistent_load,
        placeholders=placeholders,
        progress=progress,
    ).load()


def check_pickle_budget(data: bytes, budget: int, what: str) -> int:
    """Walk `data`'s opcodes without building anything, for a pickle torch's weights-only
    unpickler will load: charge each what that unpickler retains for it (OPCODE_COST, with
    its dict memo and its tensors; ENTRY per pair a DICT or SETITEMS stores, the stack
    tracked by each opcode's declared effect) and refuse past `budget` bytes, or a memo
    index no entry has (picklers number them in order). Returns the charge."""
    charged, depth, marks, entries = TEXT_PER_BYTE * len(data), 0, [], 0
    try:
        for opcode, arg, _pos in pickletools.genops(data):
            charged += _TORCH_OPCODE_COST[ord(opcode.code)]
            before, after = opcode.stack_before, opcode.stack_after
            if opcode.name == "MARK":
                marks.append(depth)
            elif pickletools.markobject in before:
                mark = marks.pop()
                if opcode.name in ("DICT", "SETITEMS"):
                    charged += ENTRY * ((depth - mark) // 2)
                depth = mark - before.index(pickletools.markobject) + len(after)
            else:
                depth += len(after) - len(before)
            if charged > budget:
                raise PickleRefused(f"{what}: {_over_budget(budget, len(data))}")
            if opcode.name == "MEMOIZE" or (opcode.name in _PUTS and arg == entries):
                entries += 1
            elif opcode.name in _MEMO_INDEXED and not (isinstance(arg, int) and 0 <= arg < entries):
                raise PickleRefused(f"{what}: memo index {cut_to(repr(arg), 40)} out of range")
    except PickleRefused:
        raise
    except Exception as err:  # a damaged stream: one line
        reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
        raise PickleRefused(
            f"{what}: damaged pickle ({error_line(err, limit=DETAIL_CHARS)})"
        ) from None
    return charged


_PUTS = frozenset(("PUT", "BINPUT", "LONG_BINPUT"))
_MEMO_INDEXED = _PUTS | {"GET", "BINGET", "LONG_BINGET"}


# ------------------------------------------------------------------ what a pickle would call
@dataclasses.dataclass(frozen=True)
class GlobalUse:
    """One global a pickle names, and what a stock unpickler (pickle.load, torch.load with
    weights_only=False) does with it: `called` (REDUCE, NEWOBJ, OBJ, INST: it runs),
    `built_into` (BUILD writes into the object the global is), or neither (a reference,
    held as a value). `name` is "module.qualname"; `UNNAMED` when the pickle computes it
    (STACK_GLOBAL of strings it did not spell out, an extension code), `COMPUTED` for a
    call of something that is no global (the result of an earlier call). `one_scalar`: a
    call with one int or str argument, the shape of an enum member's pickle; `one_int`:
    one int argument (an IntEnum member's, or a plain class's `__new__` given one int); a
    BUILD into what a `one_scalar` call returned (an enum member, one object shared by the
    whole process) is `built_into` its class. `instance`:
    the call is NEWOBJ's `cls.__new__(cls)`, an object rebuilt without its `__init__` (a
    dataclass's, a plain class's pickle)."""

    name: str
    called: bool = False
    built_into: bool = False
    one_scalar: bool = False
    one_int: bool = False
    instance: bool = False


UNNAMED = "<a global the pickle computes>"
COMPUTED = "<a callable an earlier call returned>"


@dataclasses.dataclass(frozen=True)
class _Ref:
    """A global on the (modelled) stack; `made`: the result of calling it; `member`: of
    calling it with one scalar (an enum member, shared by the whole process)."""

    name: str
    made: bool = False
    member: bool = False


_TEXT_ARG = object()  # a 1-tuple of one str: an enum member's arguments
_INT_ARG = object()  # a 1-tuple of one int: an enum member's arguments
_TEXT_OPS = frozenset(("UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"))
_NUMBER_OPS = frozenset(("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1"))
_CALL_OPS = frozenset(("REDUCE", "NEWOBJ", "NEWOBJ_EX", "OBJ", "INST"))


def pickle_globals(data: bytes) -> list[GlobalUse]:
    """Every global `data` names and whether a stock unpickler would call it, read off its
    opcodes alone (pickletools.genops up to STOP): nothing is imported, built or run.

    The stack is modelled only as far as globals need: which slot holds which global (or
    the result of calling one), a string STACK_GLOBAL may take its name from, and what
    the memo stores. Each opcode's declared stack effect moves everything else. Raises
    PickleRefused for a stream that is damaged (an opcode pickletools does not know, a
    stack that runs out)."""
    uses: list[GlobalUse] = []
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}
    try:
        for opcode, arg, _pos in pickletools.genops(data):
            name = opcode.name
            if name == "MARK":
                marks.append(len(stack))
                continue
            before = opcode.stack_before
            if pickletools.markobject in before:
                mark, under = marks.pop(), before.index(pickletools.markobject)
                if under > mark:
                    raise PickleRefused(f"opcode {name} finds too few values on the stack")
                below = stack[mark - under : mark]
                popped = below + stack[mark:]
                del stack[mark - len(below) :]
            else:
                if len(before) > len(stack):
                    raise PickleRefused(f"opcode {name} finds too few values on the stack")
                popped = stack[len(stack) - len(before) :]
                del stack[len(stack) - len(before) :]
            stack.extend(_pushed(name, arg, popped, memo, uses))
            if name in _PUTS and isinstance(arg, int):
                memo[arg] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
    except PickleRefused:
        raise
    except Exception as err:  # a damaged stream: one line
        reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
        raise PickleRefused(f"damaged pickle ({error_line(err, limit=DETAIL_CHARS)})") from None
    return list(dict.fromkeys(uses))


def _pushed(
    name: str, arg: Any, popped: list, memo: dict[int, Any], uses: list[GlobalUse]
) -> list[Any]:
    """What opcode `name` leaves on the modelled stack, recording the globals it names,
    calls or builds into in `uses`; `popped`: what it took (the mark's items last)."""
    if name in _TEXT_OPS:
        return [arg]
    if name in _NUMBER_OPS:
        return [0]
    if name in ("GLOBAL", "INST"):
        module, _, qualname = str(arg).partition(" ")
        ref = _Ref(f"{module}.{qualname}")
        if name == "INST":
            uses.append(GlobalUse(ref.name, called=True))
            return [_Ref(ref.name, made=True)]
        uses.append(GlobalUse(ref.name))
        return [ref]
    if name == "STACK_GLOBAL":
        module, qualname = popped
        named = isinstance(module, str) and isinstance(qualname, str)
        ref = _Ref(f"{module}.{qualname}" if named else UNNAMED)
        uses.append(GlobalUse(ref.name))
        return [ref]
    if name.startswith("EXT"):
        uses.append(GlobalUse(UNNAMED))
        return [_Ref(UNNAMED)]
    if name in ("GET", "BINGET", "LONG_BINGET"):
        return [memo.get(arg)]
    if name == "DUP":
        return popped * 2
    if name == "MEMOIZE":
        return popped
    if name == "TUPLE1":
        return [{int: _INT_ARG, str: _TEXT_ARG}.get(type(popped[0]))]
    if name in _CALL_OPS:  # the callee is what the opcode took first (OBJ: after its mark)
        callee = popped[0]
        target = callee.name if isinstance(callee, _Ref) and not callee.made else COMPUTED
        one_int = name in ("REDUCE", "NEWOBJ") and popped[1] is _INT_ARG
        scalar = name == "REDUCE" and popped[1] in (_INT_ARG, _TEXT_ARG)
        instance = name in ("NEWOBJ", "NEWOBJ_EX")
        uses.append(
            GlobalUse(target, called=True, one_scalar=scalar, one_int=one_int, instance=instance)
        )
        return [_Ref(target, made=True, member=scalar)]
    if name in _FILLS:  # the target stays; filling a global itself changes it for everyone
        target = popped[0]
        if isinstance(target, _Ref) and (not target.made or target.member):
            uses.append(GlobalUse(target.name, built_into=True))
        return [target]
    return [None] * len(_AFTER[name])


# Opcodes that write into the object below their operands and leave it on the stack.
_FILLS = frozenset(("BUILD", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "ADDITEMS"))
_AFTER = {op.name: op.stack_after for op in pickletools.opcodes}


__all__ = [
    "BUDGET_PER_BYTE",
    "COMPUTED",
    "MIN_BUDGET",
    "OPCODE_COST",
    "PROGRESS_EVERY",
    "UNNAMED",
    "GlobalUse",
    "PickleRefused",
    "Placeholder",
    "PlaceholderCall",
    "PlaceholderPolicy",
    "Progress",
    "RestrictedUnpickler",
    "check_pickle_budget",
    "is_flat",
    "memory_budget",
    "pickle_globals",
    "restricted_loads",
]
