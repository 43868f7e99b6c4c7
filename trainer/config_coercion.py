"""Typing the config's values: each value of a YAML file or override checked against its
field's annotation (its type, then the `Range` or `Checked` declared on it, `~` expanded in a
`LocalPath`), or refused in one line that names the key, its source and what it expects.

The annotation markers and ConfigError come from `trainer.config_base`, which the schema in
`trainer.config` imports too, so this module needs nothing of the schema's own; `NullIsEmpty`,
a marker only this module reads, is declared here.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from typing import Annotated, Any, Literal, cast

from mfsdp_ckpt.format.dtypes import short_dtype_name
from trainer.config_base import (
    COMMAND_LINE,
    TEXT_VALUES,
    Checked,
    ConfigError,
    ExpandUser,
    Range,
    unannotated,
)
from trainer.shown_value import shown_value


@dataclasses.dataclass(frozen=True)
class NullIsEmpty:
    """Marks a list field that takes null as the empty list, as verl reads it: verl's
    sft_trainer.yaml sets `data.prompt_dict_keys: null` and its SFTDataset reads
    `[] if not prompt_dict_keys`, so a verl config carried over was refused ("expects a list
    of strings, got null"). Other lists keep refusing null: there it is a mistake (an unset
    `train_files: ~`), and `[]` is how to clear one. With `blank`, the empty text is none
    too: verl users write `val_files: ""` for no validation files, which was read as a file
    named "" and refused as missing, with advice to generate data."""

    blank: bool = False


def build_section(cls: type, values: dict[str, Any], prefix: str, source: str, command: str) -> Any:
    """Section `cls` at `prefix` of `mfsdp train <command>`'s config, whose keys are all
    known (`_build_config` refused any other)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    known = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for name in known:
        if name not in values:
            continue
        kwargs[name] = _coerce(hints[name], values[name], f"{prefix}{name}", source, command)
    return cls(**kwargs)


def _coerce(kind: Any, value: Any, key: str, source: str, command: str) -> Any:
    """Check `value` against the annotation `kind`; accept obvious widenings (int -> float).

    A YAML file and a `key=value` override both reach here, so every check is made on the
    value as parsed and names the key and its source: a wrong type caught here is one line,
    not a traceback from deep in a run minutes later. What is accepted besides the exact
    type is what YAML or a shell makes of a right value: `2e-5` read as a string by YAML
    1.1, one file given where a list is expected, `bfloat16` as torch spells the dtype.
    A union tries each member in order and, when a member's type fits but its range does
    not, says the range rather than "expects A or B". Integers are held to int64 (torch's
    and numpy's limit) and numbers to finite values, since no setting means nan or inf."""
    origin = typing.get_origin(kind)
    if origin is Annotated:
        return _coerce_annotated(kind, value, key, source, command)
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            fields = ", ".join(f.name for f in dataclasses.fields(kind))
            raise _expected(kind, value, key, source, f"a section (mapping of {fields})")
        return build_section(cast(type, kind), value, f"{key}.", source, command)
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(kind, value, key, source, command)
    if origin is Literal:
        return _coerce_literal(kind, value, key, source)
    if origin is list:
        return _coerce_list(kind, value, key, source, command)
    if origin is dict:
        if not isinstance(value, dict):
            raise _expected(kind, value, key, source, "a mapping")
        return dict(value)
    if kind is Any:
        return value
    if kind is bool and not isinstance(value, bool):
        raise _expected(kind, value, key, source, "true or false")
    if kind is int:
        return _coerce_int(kind, value, key, source)
    if kind is float:
        return _coerce_float(kind, value, key, source)
    if kind is str and not isinstance(value, str):
        values = f" ({TEXT_VALUES[key]})" if key in TEXT_VALUES else ""
        hint = _text_hint(key, value, source)
        raise _expected(kind, value, key, source, f"a string{values}", hint)
    if kind in (bool, str):
        return value
    # an annotation this loader does not know: a bug in the schema
    raise _expected(kind, value, key, source, _type_name(kind))


def _text_hint(key: str, value: Any, source: str) -> str:
    """What to write for the text key `key` given `value`, which is no text: a list of one
    text is that text alone (`data.prompt_key=[extra_info]`, verl's SFTDataset reads a
    list's first element), a number or boolean is quoted (`_quoting_hint`)."""
    one = isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], str)
    if not one or "[" in key:  # a list's element given a list: no one line fixes that
        return _quoting_hint(key, value, source)
    form = (
        f"{key}={value[0]}" if source == COMMAND_LINE else f"{key.rsplit('.', 1)[-1]}: {value[0]}"
    )
    return f"; give {value[0]} alone, not a list: {form}"


def _quoting_hint(key: str, value: Any, source: str) -> str:
    """For a string key given a number or boolean (YAML's reading of `6`, `true`, `0x1f`,
    whose text is gone by now): the quoting that keeps the text as written, in the form
    `source` takes (a YAML file's `run_dir: "..."`, the shell's `key='"..."'`), a list's
    for a list's element (`train_files[0]: "..."` is no YAML anyone writes). A key of named
    values given a boolean is told them instead: `resume: true` quoted would name a dir."""
    if not isinstance(value, (bool, int, float)):
        return ""
    read_as = "a boolean" if isinstance(value, bool) else "a number"
    if isinstance(value, bool) and key in TEXT_VALUES:
        return f", which YAML reads as {read_as}: write one of {TEXT_VALUES[key]}"
    whole, index, _ = key.partition("[")
    quoted = '["...", ...]' if index else '"..."'
    if source == COMMAND_LINE:
        form = f"{whole}='{quoted}'"
    else:
        form = f"{whole.rsplit('.', 1)[-1]}: {quoted}"
    return f", which YAML reads as {read_as}: quote the text to keep it as written ({form})"


def _expected(
    kind: Any, value: Any, key: str, source: str, expected: str, hint: str = ""
) -> ConfigError:
    """The one line for a value of the wrong type: what `key` expects and what it got, and
    then `hint`."""
    # YAML reads `~` (the home directory to a shell user) and a bare `key:` as null
    got = shown_value(value, key)
    if value is None:
        got = "null (YAML's ~, null, or nothing after the colon)"
    empty = "; an empty list is []" if value is None and typing.get_origin(kind) is list else ""
    return ConfigError(f"{source}: config key '{key}' expects {expected}, got {got}{empty}{hint}")


def _coerce_annotated(kind: Any, value: Any, key: str, source: str, command: str) -> Any:
    """The base type's value (null as [] where `NullIsEmpty` marks it), then the annotation's
    checks: `~` expanded, a range held."""
    base, *checks = typing.get_args(kind)
    if any(
        isinstance(check, NullIsEmpty) and (value is None or (check.blank and value == ""))
        for check in checks
    ):
        value = []
    coerced = _coerce(base, value, key, source, command)
    for check in checks:
        if isinstance(check, ExpandUser):
            coerced = os.path.expanduser(coerced)
        if isinstance(check, Range) and not check.accepts(coerced):
            raise RangeError(
                f"{source}: config key '{key}' must be {check.text}, got {shown_value(value, key)}"
            )
        if isinstance(check, Checked) and (why := check.refusal(coerced, key)) is not None:
            raise RangeError(f"{source}: {why}")
    return coerced


def _coerce_union(kind: Any, value: Any, key: str, source: str, command: str) -> Any:
    """The first member that takes `value`; where a member's type fits but its range does
    not, its range is the message (not "expects A or B")."""
    args = typing.get_args(kind)
    if value is None and type(None) in args:
        return None
    out_of_range = None
    for option in (a for a in args if a is not type(None)):
        try:
            return _coerce(option, value, key, source, command)
        except RangeError as err:  # the type fits: its range is the message
            out_of_range = out_of_range or err
        except ConfigError:
            continue
    if out_of_range is not None:
        raise out_of_range
    takes_text = any(unannotated(a) is str for a in args)  # `str | None`: say the quoting too
    hint = _text_hint(key, value, source) if takes_text else ""
    raise _expected(kind, value, key, source, " or ".join(_type_name(a) for a in args), hint)


def _coerce_literal(kind: Any, value: Any, key: str, source: str) -> Any:
    args = typing.get_args(kind)
    written = value  # a refusal quotes the value as written (`half`), not its alias (`fp16`)
    if "bf16" in args and isinstance(value, str):  # a dtype: `bfloat16` as torch spells it
        value = short_dtype_name(value)
    if value not in args:
        raise _expected(kind, written, key, source, "one of " + " | ".join(str(a) for a in args))
    return value


def _coerce_list(kind: Any, value: Any, key: str, source: str, command: str) -> list[Any]:
    args = typing.get_args(kind)
    element = unannotated(args[0]) if args else None
    single = isinstance(value, str)
    if single and (element is str or typing.get_origin(element) is Literal):
        value = [value]  # a single file is a list of one; so is `trainer.logger=console`
    if not isinstance(value, (list, tuple)):
        what = _plural_type_name(args[0]) if args else "values"
        raise _expected(kind, value, key, source, f"a list of {what}")
    if not args:
        return list(value)
    items = [_coerce(args[0], v, f"{key}[{i}]", source, command) for i, v in enumerate(value)]
    if "" in items and _is_path(args[0]):  # read as a file named "", then "no such file"
        item = "" if single else f": item {items.index('') + 1}"
        raise RangeError(
            f"{source}: config key '{key}'{item} is an empty path; give a file"
            f"{'' if single else ', or leave the item out'}"
        )
    return items


def _is_path(kind: Any) -> bool:
    """Whether `kind` is a path (`LocalPath`: a text whose `~` is expanded)."""
    checks = typing.get_args(kind)[1:] if typing.get_origin(kind) is Annotated else ()
    return any(isinstance(check, ExpandUser) for check in checks)


def _coerce_int(kind: Any, value: Any, key: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _expected(kind, value, key, source, "an integer")
    if value not in INT64:  # torch (seeds, sizes, steps) and numpy take int64 at most
        raise RangeError(
            f"{source}: config key '{key}' must fit in 64 bits (|x| < 2**63),"
            f" got {shown_value(value, key)}"
        )
    return value


def _coerce_float(kind: Any, value: Any, key: str, source: str) -> float:
    if isinstance(value, str):  # YAML 1.1 reads `2e-5` (no dot) as a string
        try:
            number = float(value)
        except ValueError:
            raise _expected(kind, value, key, source, "a number") from None
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _expected(kind, value, key, source, "a number")
    else:
        try:
            number = float(value)
        except OverflowError:  # an integer past float's range (1e308)
            number = math.inf
    if not math.isfinite(number):  # nan and inf: no setting means either
        raise RangeError(
            f"{source}: config key '{key}' must be a finite number, got {shown_value(value, key)}"
        )
    return number


INT64 = range(-(2**63), 2**63)


class RangeError(ConfigError):
    """A value of the right type outside its field's declared range."""


_TYPE_WORDS = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "a string",
    type(None): "null",
}


_PLURAL_TYPE_WORDS = {int: "integers", float: "numbers", bool: "booleans", str: "strings"}


def _plural_type_name(kind: Any) -> str:
    """What a list holds, in words: "a list of numbers", not "a list of a number"."""
    kind = unannotated(kind)
    return _PLURAL_TYPE_WORDS.get(kind) or f"values each {_type_name(kind)}"


def _type_name(kind: Any) -> str:
    if kind in _TYPE_WORDS:
        return _TYPE_WORDS[kind]
    if typing.get_origin(kind) is list:
        return "a list"
    if typing.get_origin(kind) is Annotated:
        return _type_name(unannotated(kind))
    return getattr(kind, "__name__", str(kind))
