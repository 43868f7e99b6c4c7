"""A pickle reader for bytes from someone else's checkpoint: data only, bounded, no side effects.

A pickle is a small program. `find_class` allow-lists alone stop it from running code, but
not from (a) mutating what it is allowed to name: BUILD on an admitted object writes into
its `__dict__`, so a `.metadata` that BUILDs `torch.float32`'s stand-in rewrites the
process-wide dtype table for everything read afterwards; (b) making the reader allocate
without bound: 40 MB of EMPTY_DICT opcodes is 40 million dicts (~2.9 GB), and the C
unpickler sizes its memo array by the largest index a PUT names.

`RestrictedUnpickler` is the pure-Python unpickler (its memo is a dict) with a fixed
opcode table. On top of the allow-list of globals it:

* counts opcodes and refuses past `max_ops` (each opcode retains at most a few dozen
  bytes beyond the input's own bytes, so the count bounds memory);
* lets BUILD, SETITEM(S) and APPEND(S) touch only objects this pickle created itself
  (records made by NEWOBJ/REDUCE of an admitted record class, each BUILT once with only
  its declared fields; dicts and lists, which no admitted global is);
* hashes only flat keys (scalars, tuples of scalars, records holding those), so a key
  nested a million tuples deep cannot overflow the C stack while being hashed;
* refuses every other opcode (sets, extensions, protocol-0 class instantiation,
  out-of-band buffers), and persistent ids unless the caller asks for them;
* with a `placeholders` policy, turns a global outside the allow-list into a
  `Placeholder` (its name, never imported) and a call or NEWOBJ of one into a
  `PlaceholderCall` (the name, the arguments and any BUILD state, kept as data): a
  pickled argparse.Namespace holds enums, dtypes and partials of code this process does
  not have and must not import, yet its plain fields are what a reader wants.

Errors are `PickleRefused` with one line; callers add the file name.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import pickletools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, ClassVar

from mfsdp_ckpt.errors import MfsdpFailedError

# An opcode retains at most ~72 bytes (floods of EMPTY_DICT, EMPTY_LIST or MARK; measured by
# scripts/pickle_budget.py), so 12M opcodes stay under 1 GiB. A real .metadata takes ~69
# opcodes per chunk: the limit admits ~170,000 chunks.
DEFAULT_MAX_OPS = 12_000_000
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
    "GLOBAL",
    "STACK_GLOBAL",
    "GET",
    "BINGET",
    "LONG_BINGET",
    "PUT",
    "BINPUT",
    "LONG_BINPUT",
    "MEMOIZE",
)


@dataclasses.dataclass(frozen=True)
class Placeholder:
    """A global the pickle names that is not admitted: its name, never imported."""

    module: str
    name: str

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
        return f"<{self.target.qualname}{self.args!r:.60}>"


PlaceholderPolicy = Callable[[str, str], Placeholder]


def is_flat(value: Any) -> bool:
    """A scalar, or a tuple/list of scalars: safe to hash, compare and print."""
    if isinstance(value, _SCALARS):
        return True
    return isinstance(value, (tuple, list)) and all(isinstance(v, _SCALARS) for v in value)


def _hashable_key(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return isinstance(value, tuple) and is_flat(value)
    if isinstance(value, _SCALARS):
        return True
    state = getattr(value, "__dict__", None)
    return (
        dataclasses.is_dataclass(value)
        and isinstance(state, dict)
        and all(
            (isinstance(v, tuple) and is_flat(v)) or isinstance(v, _SCALARS) for v in state.values()
        )
    )


def _check_table(allowed: dict[tuple[str, str], object]) -> None:
    """Dicts and lists on the stack are then always this pickle's own (EMPTY_DICT, LIST,
    ...; no admitted constructor returns a shared one), so SETITEM and APPEND need no
    bookkeeping per container, which would double the memory of a flood of them."""
    if any(isinstance(value, (dict, list)) for value in allowed.values()):
        raise TypeError("a class table may not admit a dict or list object")


class RestrictedUnpickler(pickle._Unpickler):
    """Unpickles `data` into fresh objects built only from `allowed`.

    `allowed` maps (module, name) to what that global resolves to. `records` are the
    classes whose instances the pickle may create and fill (BUILD) once each.
    `persistent_load`, when given, resolves persistent ids (torch.save's storages).
    """

    dispatch: ClassVar[dict[int, Callable]] = {}
    # Set up by pickle._Unpickler.load(); typeshed does not declare them.
    stack: list[Any]
    append: Callable[[Any], None]
    pop_mark: Callable[[], list[Any]]

    def __init__(
        self,
        data: bytes,
        allowed: dict[tuple[str, str], object],
        records: tuple[type, ...],
        *,
        max_ops: int = DEFAULT_MAX_OPS,
        persistent_load: Callable[[Any], Any] | None = None,
        placeholders: PlaceholderPolicy | None = None,
    ):
        self._stream = io.BytesIO(data)
        super().__init__(self._stream)
        _check_table(allowed)
        if placeholders is not None:
            records = (*records, PlaceholderCall)
        self.allowed, self.records, self.max_ops = allowed, records, max_ops
        self._placeholders = placeholders
        self._callables: dict[int, Callable[..., Any]] = {
            id(v): v for v in allowed.values() if callable(v)
        }
        self._fresh: dict[int, Any] = {}  # id -> object created here (kept alive: ids stay unique)
        self._built: set[int] = set()
        self._persistent = persistent_load

    def find_class(self, module: str, name: str) -> object:
        try:
            return self.allowed[(module, name)]
        except (KeyError, TypeError):
            if self._placeholders is not None and isinstance(module, str):
                return self._placeholders(module, name)  # the policy may refuse it
            raise PickleRefused(
                f"refusing to load global {module}.{name}: not an admitted type"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        if self._persistent is None or not isinstance(pid, tuple):
            raise PickleRefused("refusing a persistent id: this pickle may not reference storages")
        return self._persistent(pid)

    def load(self) -> Any:
        """The stdlib loop, reading straight from the bytes (FRAME is only a buffering hint,
        so no unframer) and counting opcodes inline: per opcode, one C read and one call."""
        stream = self._stream
        self.read, self.readline, self.readinto = stream.read, stream.readline, stream.readinto
        self.metastack: list[list[Any]] = []
        self.stack, self.proto = [], 0
        self.append = self.stack.append
        read, dispatch, left = stream.read, self.dispatch, self.max_ops
        try:
            while True:
                key = read(1)
                if not key:
                    raise EOFError
                left -= 1
                if left < 0:
                    raise PickleRefused(
                        f"more than {self.max_ops} pickle opcodes (the limit for this file)"
                    )
                dispatch[key[0]](self)
        except pickle._Stop as stop:  # type: ignore[attr-defined]
            return stop.value

    def _load_frame(self) -> None:
        self.read(8)  # the frame's length: the bytes follow in the same stream

    # ------------------------------------------------------------------ guarded opcodes
    def _mine(self, obj: Any) -> bool:
        return self._fresh.get(id(obj)) is obj

    def _set_items(self, target: Any, items: list) -> None:
        if type(target) not in (dict, OrderedDict):  # never shared: see _check_table
            raise PickleRefused(f"SETITEM on a {type(target).__name__}")
        if len(items) % 2:
            raise PickleRefused("SETITEMS with an odd number of items")
        for i in range(0, len(items), 2):
            if not _hashable_key(items[i]):
                raise PickleRefused(f"dict key of type {type(items[i]).__name__} is not plain data")
            target[items[i]] = items[i + 1]

    def _load_dict(self) -> None:
        items = self.pop_mark()
        target: dict = {}
        self._set_items(target, items)
        self.append(target)

    def _load_setitem(self) -> None:
        value, key = self.stack.pop(), self.stack.pop()
        self._set_items(self.stack[-1], [key, value])

    def _load_setitems(self) -> None:
        items = self.pop_mark()
        self._set_items(self.stack[-1], items)

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
        result = PlaceholderCall(target, args)
        self._fresh[id(result)] = result
        return result

    def _call(self, func: Any, args: Any) -> Any:
        if isinstance(func, Placeholder):  # never called: only recorded
            return self._placeholder_call(func, args)
        admitted = self._callables.get(id(func))
        if admitted is None or admitted is not func:
            raise PickleRefused(
                f"refusing to call {type(func).__name__}: not an admitted constructor"
            )
        if not isinstance(args, tuple):
            raise PickleRefused("constructor arguments are not a tuple")
        if isinstance(func, type) and issubclass(func, dict):
            if args:  # items arrive by SETITEMS, where keys are checked before hashing
                raise PickleRefused(f"{func.__name__} built with arguments")
            return func()
        result = admitted(*args)
        if isinstance(func, type) and func in self.records:
            self._fresh[id(result)] = result
        return result

    def _load_reduce(self) -> None:
        args = self.stack.pop()
        self.stack[-1] = self._call(self.stack[-1], args)

    def _load_newobj(self) -> None:
        args, cls = self.stack.pop(), self.stack.pop()
        if isinstance(cls, Placeholder):
            self.append(self._placeholder_call(cls, args))
            return
        if not (isinstance(cls, type) and cls in self.records) or args != ():
            raise PickleRefused(
                f"NEWOBJ of {getattr(cls, '__name__', type(cls).__name__)} is not admitted"
            )
        record: Any = cls  # a record class; mypy would resolve `__new__` on `type` itself
        obj = record.__new__(record)
        self._fresh[id(obj)] = obj
        self.append(obj)

    def _load_build(self) -> None:
        state = self.stack.pop()
        inst = self.stack[-1]
        cls = type(inst)
        if cls not in self.records or not self._mine(inst) or id(inst) in self._built:
            raise PickleRefused(f"BUILD on a {cls.__name__} this pickle did not just create")
        self._built.add(id(inst))
        own_setstate, names = _build_plan(cls)
        if own_setstate:
            inst.__setstate__(state)
            return
        if isinstance(state, tuple) and len(state) == 2 and state[1] is None:
            state = state[0]
        if not isinstance(state, dict) or not all(isinstance(k, str) and k in names for k in state):
            raise PickleRefused(f"BUILD of {cls.__name__} with fields it does not have")
        for key, value in state.items():
            object.__setattr__(inst, key, value)

    def _load_long4(self) -> None:
        raise PickleRefused("LONG4: an integer of more than 255 bytes is not checkpoint data")

    def _load_persid(self) -> None:
        self.stack[-1] = self.persistent_load(self.stack[-1])


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
            _opcode("NEWOBJ"): own._load_newobj,
            _opcode("BUILD"): own._load_build,
            _opcode("BINPERSID"): own._load_persid,
            _opcode("LONG4"): own._load_long4,
            _opcode("FRAME"): own._load_frame,
        }
    )
    return {code: handlers[code] if code in handlers else _refuse(code) for code in range(256)}


RestrictedUnpickler.dispatch = _dispatch_table()


def restricted_loads(
    data: bytes,
    allowed: dict[tuple[str, str], object],
    records: tuple[type, ...] = (),
    *,
    max_ops: int = DEFAULT_MAX_OPS,
    persistent_load: Callable[[Any], Any] | None = None,
    placeholders: PlaceholderPolicy | None = None,
) -> Any:
    """The object in `data`, or PickleRefused (policy) / another exception (damaged bytes)."""
    return RestrictedUnpickler(
        data,
        allowed,
        records,
        max_ops=max_ops,
        persistent_load=persistent_load,
        placeholders=placeholders,
    ).load()


def check_pickle_limits(data: bytes, max_ops: int, what: str) -> None:
    """Walk `data`'s opcodes without building anything; refuse past `max_ops` opcodes or a
    memo index beyond them. For pickles another unpickler (torch's weights-only) will load."""
    try:
        for count, (opcode, arg, _pos) in enumerate(pickletools.genops(data), 1):
            if count > max_ops:
                raise PickleRefused(f"{what}: more than {max_ops} pickle opcodes")
            if opcode.name in ("PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET") and (
                not isinstance(arg, int) or not 0 <= arg < max_ops
            ):
                raise PickleRefused(f"{what}: memo index {arg!r:.40} out of range")
    except PickleRefused:
        raise
    except Exception as err:  # a damaged stream: one line
        raise PickleRefused(
            f"{what}: damaged pickle ({type(err).__name__}: {str(err)[:120]})"
        ) from None


__all__ = [
    "DEFAULT_MAX_OPS",
    "PickleRefused",
    "Placeholder",
    "PlaceholderCall",
    "PlaceholderPolicy",
    "RestrictedUnpickler",
    "check_pickle_limits",
    "is_flat",
    "restricted_loads",
]
