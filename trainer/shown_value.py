"""How a config error quotes the value it refuses: short enough for one line, whatever the
value, and as the user typed it where it came from a command-line override.

A YAML integer may run to thousands of digits (and Python refuses to write one of more
than 4,300 in decimal at all), a string or list to a megabyte; an error quoting one whole is
no longer one line a user can read, and one that fails to format it is a traceback.

An override's value is read as YAML, and Python's spelling of what YAML read is not what
was typed: `optim.lr=true` was quoted back as `True`, `1e-5` as `'1e-5'` or `1e-05`,
`null` as `None`. verl's own scripts write both `true` and `True`, so no one spelling is
right: while the loader reads the command line (`overrides_typed`), an error quotes an
override's value by the text typed (`typed_text`), where the value it refuses is still the
one that text was read as.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from trainer.yaml_spelling import yaml_spelling

MAX_SHOWN_CHARS = 80
# A container whose Python spelling runs longer keeps it: PyYAML's emitter takes seconds over
# the list a 1 MiB config can hold, and the line shows MAX_SHOWN_CHARS of it
_YAML_SPELT_CHARS = 4096

# key -> (the text typed after `key=`, the value YAML read it as), while the loader reads
# the command line; empty otherwise, so a config file's value is never quoted by it
_TYPED: contextvars.ContextVar[Mapping[str, tuple[str, Any]]] = contextvars.ContextVar(
    "overrides_typed", default=MappingProxyType({})
)


@contextlib.contextmanager
def overrides_typed(typed: Mapping[str, tuple[str, Any]]) -> Iterator[None]:
    """While the loader reads the command line's overrides: `typed` maps each key (as
    given, and the mfsdp key it sets) to the text typed and the value read from it."""
    token = _TYPED.set(MappingProxyType(dict(typed)))
    try:
        yield
    finally:
        _TYPED.reset(token)


def _read_as(read: Any, value: Any) -> bool:
    """Whether `value` is `read` (an override's YAML value) as the loader typed it: the
    same value of the same type, or a number from its text (YAML 1.1 reads `1e-5`, no dot,
    as a string) or an integer."""
    try:
        if isinstance(value, float) and not isinstance(read, bool) and isinstance(read, str | int):
            return float(read) == value
        return type(read) is type(value) and bool(read == value)
    except (ValueError, OverflowError, TypeError):
        return False


def typed_text(key: str, value: Any) -> str | None:
    """The text the override of `key` was typed as, cut to MAX_SHOWN_CHARS, where `value` is
    what it was read as (not a value a rule made of it: verl's `min_lr_ratio` becomes
    another `optim.min_lr`); None for any other value, or outside the command line's reading."""
    found = _TYPED.get().get(key.lstrip("+"))
    if found is None or not _read_as(found[1], value):
        return None
    return cut_to(found[0], MAX_SHOWN_CHARS)


def shown_value(value: Any, key: str | None = None) -> str:
    """The override's text where `value` is the override of `key` (`typed_text`), else
    `value` as YAML writes it (`yaml_spelling`) cut to MAX_SHOWN_CHARS characters
    (`cut_to`: its start and end, and how many were left out between them); an integer of
    more digits shows its first 40 and says how many it has (or that it has more than
    Python writes)."""
    typed = None if key is None else typed_text(key, value)
    if typed is not None:
        return typed
    try:
        text = repr(value)
    except ValueError:  # an int past sys.get_int_max_str_digits(), the one repr that fails
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    if len(text) <= _YAML_SPELT_CHARS:
        text = yaml_spelling(value)
    elif isinstance(value, str):  # only its ends are shown: spelt from them, not a megabyte
        ends = MAX_SHOWN_CHARS // 2
        text = yaml_spelling(value[:ends]) + value[ends:-ends] + yaml_spelling(value[-ends:])
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    if isinstance(value, int):
        return f"{text[:40]}... ({len(text.lstrip('-'))} digits)"
    return cut_to(text, MAX_SHOWN_CHARS)
