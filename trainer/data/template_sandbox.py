"""Render a model's chat template with every value it makes bounded in size.

A chat template is the model dir's code, run on every row. transformers renders it in
Jinja's immutable sandbox, which stops it from reaching Python's internals but not from
allocating: `{{ 'a' * 600000000 }}` (63 bytes of template) made a 600 MB string in one C
call, which no signal interrupts, and the tokenizer then aborted the process on it. Here
the same sandbox is given a size `limit` (characters: what the row's token limit can
hold) that every value the template computes must stay within, checked before the
operation that would make it:

* `*`, `**` and `+` (repetition, big integers, concatenation), `%` formatting and `~`
  are checked from their operands' sizes, and integers stay under MAX_INT_BITS;
* calls of the string methods that pad, repeat or substitute (`ljust`, `replace`,
  `join`, `format`, ...) and the filters that do (`center`, `indent`, `join`,
  `wordwrap`, `batch`, `tojson`, ...) are checked from their arguments, every argument
  of every call and filter must be within the limit, and a sequence a filter or call
  returns lazily is counted as it is consumed (`range(99999)|map('center', 99999)|list`
  would hold 10**10 characters made 10**5 at a time);
* what the template writes out, and every block it buffers, is counted as it is joined.

Size is counted in characters of text, items of containers and digits of integers, so a
value's text (`str`, `repr`, JSON) is at most a small multiple of it. Filters no chat
template uses that grow their output in ways not checked here (`pprint`, `urlize`) and the
`lipsum` generator are not offered. Constant expressions are not folded at compile time:
the checks run when the template renders, for every value alike. Everything else is
transformers' rendering (`transformers.utils.chat_template_utils`): its Jinja settings,
`raise_exception`, `strftime_now`, its `tojson`, and its `{% generation %}` blocks.
"""

from __future__ import annotations

import functools
import json
import re
import string
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, ClassVar

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension, loopcontrols
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from mfsdp_ckpt.errors import MfsdpUsageError

MAX_INT_BITS = 4096  # a chat template counts turns and tokens; no template needs more
MAX_JSON_INDENT = 64  # characters of tojson's indent and separators (templates use 2 or 4)
# What str() or repr() of a value can take per unit of its counted size (`\U0001f600`)
TEXT_PER_SIZE = 10
_UNOFFERED_FILTERS = ("pprint", "urlize")
_UNOFFERED_GLOBALS = ("lipsum",)
# %-format specifications, with their width and precision
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")


class TemplateSizeError(jinja2.TemplateError, MfsdpUsageError):
    """Rendering would make a value larger than the limit; the message says which."""


def size_of(value: Any, limit: int) -> int:
    """`value`'s size (characters of text, digits of an integer, items and their sizes in
    containers), counted until it passes `limit`."""
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, int):
            total += max(1, item.bit_length() // 3)  # at least its decimal digits
        elif isinstance(item, dict):
            total += len(item) + 1
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += len(item) + 1
            stack.extend(item)
        else:
            total += 1
    return total


def _count(value: Any) -> int | None:
    """`value` as a count when it is an integer (a width, a repeat), else None."""
    return int(value) if isinstance(value, int) else None


class _GenerationBlocks(Extension):
    """`{% generation %}...{% endgeneration %}`: parsed, and rendered as its body alone, as
    transformers renders it (its AssistantTracker adds only the spans, which the SFT masks
    do not read: they are verl's, whatever a template's blocks cover)."""

    # jinja2 annotates Extension.tags as an instance attribute; it reads it off the class
    tags: ClassVar[set[str]] = {"generation"}  # type: ignore[misc]

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Callable[[], str]) -> str:
        return caller()


class _TextBuffer(list):
    """What a macro, block or `{% set %}` body writes, counted as it is written: a loop
    writing 10**5 new strings of 10**3 characters held 10**8 before they were joined."""

    def __init__(self, environment: BoundedSandbox):
        super().__init__()
        self.environment, self.written = environment, 0

    def append(self, piece: str) -> None:
        self._count([piece])
        super().append(piece)

    def extend(self, pieces: Iterable[str]) -> None:
        pieces = tuple(pieces)
        self._count(pieces)
        super().extend(pieces)

    def _count(self, pieces: Iterable[str]) -> None:
        self.written += sum(map(len, pieces))
        self.environment._allow(self.written, "the text written")


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator with `a ~ b` joined by the environment (`joined_text`),
    which checks the sizes, instead of a plain str.join, and buffered output written into
    a `_TextBuffer`."""

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.text_buffer()")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.joined_text((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """transformers' chat template environment, every value within `limit` (module
    docstring)."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def __init__(self, limit: int):
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_GenerationBlocks, loopcontrols],
            optimized=False,
            finalize=jinja2.pass_context(lambda context, value: self._within(value, "output")),
        )
        self.limit = limit
        for name in _UNOFFERED_FILTERS:
            self.filters.pop(name, None)
        for name in _UNOFFERED_GLOBALS:
            self.globals.pop(name, None)
        self.filters["tojson"] = self._tojson
        self.filters = {name: self._bounded_filter(name, f) for name, f in self.filters.items()}
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now

    # ----------------------------------------------------------------------- checks
    def _within(self, value: Any, what: str) -> Any:
        """`value`, when its size is within the limit."""
        self._allow(size_of(value, self.limit), what)
        return value

    def _allow(self, size: int, what: str) -> None:
        if size > self.limit:
            raise TemplateSizeError(f"{what} would make over {self.limit} characters")

    def _counted(self, items: Iterator[Any], what: str) -> Iterator[Any]:
        """`items`, counted as they are consumed: all of them together within the limit."""
        total = 0
        for item in items:
            total += size_of(item, self.limit)
            self._allow(total, what)
            yield item

    def _result(self, value: Any, what: str) -> Any:
        """A call's or filter's result: a lazy sequence is counted as it is consumed."""
        if isinstance(value, Iterator) and not isinstance(value, (str, bytes)):
            return self._counted(value, what)
        return value

    # ----------------------------------------------------------------------- operators
    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        what = f"{_shown(left)} {operator} {_shown(right)}"
        for operand in (left, right):
            self._within(operand, what)
        if isinstance(left, int) and isinstance(right, int):
            bits = _int_bits(operator, left, right)
            if bits > MAX_INT_BITS:
                raise SecurityError(f"{what} would be an integer of over {MAX_INT_BITS} bits")
        else:
            self._allow(self._binop_size(operator, left, right), what)
        return super().call_binop(context, operator, left, right)

    def _binop_size(self, operator: str, left: Any, right: Any) -> int:
        """How large `left operator right` would be, from its operands' sizes."""
        if operator == "*" and (_count(left) is None) != (_count(right) is None):
            repeated, times = (left, right) if _count(left) is None else (right, left)
            return size_of(repeated, self.limit) * max(times, 0)
        if operator == "%" and isinstance(left, (str, bytes)):
            text = left if isinstance(left, str) else left.decode("latin-1")
            return _percent_size(text, right, self.limit)
        return size_of(left, self.limit) + size_of(right, self.limit)

    def joined_text(self, pieces: tuple[Any, ...]) -> str:
        """`a ~ b ~ ...`: the pieces as text, joined."""
        texts = [str(self._within(piece, "~")) for piece in pieces]
        self._allow(sum(map(len, texts)), "~")
        return "".join(texts)

    def text_buffer(self) -> _TextBuffer:
        return _TextBuffer(self)

    def concat(self, pieces: Iterable[str]) -> str:
        """What a template, macro or block writes out, joined once it is all within the
        limit (Jinja's own `concat` is a plain str.join)."""
        kept, total = [], 0
        for piece in pieces:
            total += len(piece)
            self._allow(total, "the text written")
            kept.append(piece)
        return "".join(kept)

    # ----------------------------------------------------------------------- calls
    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        """A call from the template (a method, a macro, a global): every argument within
        the limit, a string method that pads or repeats checked from its arguments."""
        what = f"{getattr(__obj, '__name__', 'a call')}()"
        for value in (*args, *kwargs.values(), getattr(__obj, "__self__", None)):
            __self._within(value, what)
        method = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
        receiver = getattr(method, "__self__", None)
        if isinstance(receiver, (str, bytes)):
            name = getattr(method, "__name__", "")
            if name == "join" and args:
                args = (list(__self._counted(iter(args[0]), what)), *args[1:])
            size = _method_size(receiver, name, args, kwargs, __self.limit)
            if size is not None:
                __self._allow(size, what)
        result = super().call(__context, __obj, *args, **kwargs)
        return __self._result(result, what)

    def _bounded_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        """`func` (a filter) with its input and arguments within the limit, its growth
        checked (`_filter_size`) and a lazy result counted. It takes the template's
        context, which also keeps Jinja from running it at compile time."""
        passes = getattr(getattr(func, "jinja_pass_arg", None), "name", None)

        @jinja2.pass_context
        @functools.wraps(func)
        def bounded(context: Context, value: Any, *args: Any, **kwargs: Any) -> Any:
            what = f"|{name}"
            for given in (value, *args, *kwargs.values()):
                self._within(given, what)
            if name == "join":
                value = list(self._counted(iter(value), what))
            size = _filter_size(name, value, args, kwargs, self.limit)
            if size is not None:
                self._allow(size, what)
            leading = {
                "context": (context,),
                "eval_context": (context.eval_ctx,),
                "environment": (self,),
            }.get(passes or "", ())
            return self._result(func(*leading, value, *args, **kwargs), what)

        return bounded

    def _tojson(
        self,
        value: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        """transformers' `tojson` (its options, no HTML escaping), written piece by piece
        within the limit."""
        spacing = len(indent) if isinstance(indent, str) else _count(indent) or 0
        spacing += sum(len(str(s)) for s in separators or ())
        if spacing > MAX_JSON_INDENT:
            raise SecurityError(
                f"|tojson's indent and separators would make over {MAX_JSON_INDENT} characters"
            )
        encoder = json.JSONEncoder(
            ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )
        return self.concat(encoder.iterencode(value))


def _raise_exception(message: Any) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def _shown(value: Any) -> str:
    """`value`'s repr for an error, cut to 20 characters with `...` where it is cut: cut
    bare, a quoted string ran into the words after it (`'Tom has 11 apples a would make`)."""
    shown = repr(value)
    return shown if len(shown) <= 20 else f"{shown[:20]}..."


def _int_bits(operator: str, left: int, right: int) -> int:
    """An upper bound on the bits of `left operator right`."""
    bits = max(left.bit_length(), right.bit_length())
    if operator == "*":
        return left.bit_length() + right.bit_length()
    if operator == "**" and right > 0:
        return left.bit_length() * right if abs(left) > 1 else 1
    return bits + 1


def _percent_size(template: str, args: Any, limit: int) -> int:
    """How large `template % args` can be: each specification writes at most the largest
    argument as text, padded to the widest width or precision."""
    if isinstance(args, dict):
        values = list(args.values())
    else:
        values = list(args) if isinstance(args, tuple) else [args]
    specs = _PERCENT.findall(template)
    widths = [int(n) for spec in specs for n in spec if n.isdigit()]
    if any("*" in spec for spec in specs):
        widths += [v for v in values if isinstance(v, int)]
    return _fields_size(len(template), len(specs), values, max(widths, default=0), limit)


def _format_size(template: str, args: tuple, kwargs: dict, limit: int) -> int:
    """How large `template.format(*args, **kwargs)` can be (as `_percent_size`); a width
    given by another field (`{:{}}`) is taken as the largest integer argument."""
    fields = [spec for _, name, spec, _ in string.Formatter().parse(template) if name is not None]
    values = [*args, *kwargs.values()]
    widths = [int(n) for spec in fields for n in re.findall(r"\d+", spec or "")]
    if any("{" in (spec or "") for spec in fields):
        widths += [v for v in values if isinstance(v, int)]
    return _fields_size(len(template), len(fields), values, max(widths, default=0), limit)


def _fields_size(text: int, fields: int, values: list, width: int, limit: int) -> int:
    largest = max((size_of(v, limit) for v in values), default=0)
    return text + fields * (TEXT_PER_SIZE * largest + width)


def _method_size(
    receiver: str | bytes, name: str, args: tuple, kwargs: dict, limit: int
) -> int | None:
    """How large calling the string method `name` of `receiver` can make its result, for
    the methods whose result can outgrow their inputs; None for the others."""
    length = len(receiver)
    if name in ("ljust", "rjust", "center", "zfill") and args:
        return max(length, _count(args[0]) or 0)
    if name == "expandtabs":
        tab = "\t" if isinstance(receiver, str) else b"\t"
        tabsize = _count(args[0] if args else kwargs.get("tabsize", 8)) or 0
        return length + receiver.count(tab) * tabsize  # type: ignore[arg-type]
    if name == "replace" and len(args) >= 2:
        return _replaced_size(receiver, args[0], args[1], args[2] if len(args) > 2 else -1)
    if name == "join" and args:
        items = args[0]
        return sum(size_of(i, limit) for i in items) + max(len(items) - 1, 0) * length
    if name in ("format", "format_map") and isinstance(receiver, str):
        named = args[0] if name == "format_map" and args else kwargs
        return _format_size(receiver, args if name == "format" else (), dict(named), limit)
    if name == "translate" and args and isinstance(args[0], dict):
        longest = max((size_of(v, limit) for v in args[0].values()), default=1)
        return length * max(longest, 1)
    return None


def _replaced_size(text: Any, old: Any, new: Any, count: Any) -> int:
    """How large `text.replace(old, new, count)` would be."""
    if not isinstance(old, type(text)) or not isinstance(new, type(text)):
        return len(text)  # the call itself refuses the types
    found = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    return len(text) + found * max(len(new) - len(old), 0)


def _filter_size(name: str, value: Any, args: tuple, kwargs: dict, limit: int) -> int | None:
    """How large the built-in filter `name` can make its result, for the filters whose
    result can outgrow their input; None for the others."""

    def arg(index: int, key: str, default: Any) -> Any:
        return args[index] if len(args) > index else kwargs.get(key, default)

    size = size_of(value, limit)
    if name == "center":
        return max(size, _count(arg(0, "width", 80)) or 0)
    if name == "indent":
        prefix = arg(0, "width", 4)
        prefix_size = _count(prefix) if _count(prefix) is not None else len(str(prefix))
        return size + (str(value).count("\n") + 1) * (prefix_size or 0)
    if name == "format":
        return _percent_size(str(value), kwargs or tuple(args), limit)
    if name == "join":
        return size + max(len(value) - 1, 0) * len(str(arg(0, "d", "")))
    if name == "replace":
        return _replaced_size(str(value), arg(0, "old", ""), arg(1, "new", ""), arg(2, "count", -1))
    if name == "wordwrap":
        wrap = arg(2, "wrapstring", None)
        lines = size // 2 + size // max(_count(arg(0, "width", 79)) or 1, 1) + 1  # words, pieces
        return size + lines * len(str(wrap) if wrap is not None else "\n")
    if name in ("batch", "slice"):
        return _count(arg(0, "linecount" if name == "batch" else "slices", 0)) or 0
    return None


@functools.lru_cache(maxsize=8)
def _compiled(source: str, limit: int) -> jinja2.Template:
    """The template compiled in a BoundedSandbox of `limit` (kept per source and limit)."""
    return BoundedSandbox(limit).from_string(source)


def render(source: str, limit: int, **variables: Any) -> str:
    """The chat template `source` rendered with `variables` (messages, special tokens, ...).
    TemplateSizeError when any value it makes, or the text itself, exceeds `limit`
    characters; what else the template raises, as it raises it."""
    template = _compiled(source, limit)
    environment = template.environment
    assert isinstance(environment, BoundedSandbox)
    written = 0
    pieces = []
    for piece in template.generate(**variables):
        written += len(piece)
        environment._allow(written, "the text written")
        pieces.append(piece)
    return "".join(pieces)
