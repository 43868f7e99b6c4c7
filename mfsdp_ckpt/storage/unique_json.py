"""JSON objects with each key once: Python's json keeps the last of a key given twice,
silently. A safetensors header naming a tensor twice (which one is the weight?) or a data
row with two `messages` (one is dropped unseen) is refused instead, as the config YAML
loader refuses a key given twice. Every JSON file a user hands over (config.json, a
safetensors index, manifest.json, ckpt_contents.json, an adapter config) is read with
`loads_unique`, so none takes the last of two values unseen; `read_json_file` and
`parse_json` add what else makes Python's json fail or lie (a size cap, deep nesting, a
5,000-digit integer, NaN), so each reader refuses them in one line naming its file.

Size alone does not bound what parsing costs: Python holds each parsed object or array in
far more bytes than the two characters of `{}`, so `[{},{},...]` takes tens of times its
size in memory (gigabytes for a 50 MB file). `too_many_containers` bounds how many a text
can hold, counted before it is parsed: DEFAULT_MAX_CONTAINERS, or `max_containers` sized
for what the real ones hold from a reader that takes large files.

Nor does Python's json bound depth well: it reads a list nested ~970 deep (its recursion
limit less the caller's stack), and whatever walks the result recursively afterwards
(`json.dumps` of a manifest's fields for its digest, `dataclasses.asdict`, `==`) then
fails with a RecursionError a few levels deeper than the parser's own, a traceback for
any input in between. So `loads_unique` refuses JSON nested more than MAX_JSON_DEPTH deep,
well below the recursion limit and far past any file a user hands over, and every reader
here inherits that one bound. It is below 128 too, the depth at which Rust's
serde_json (the `tokenizers` library's reader of tokenizer.json) gives up: a JSON asset
refused by no check here loads in the tokenizer that reads it."""

from __future__ import annotations

import gc
import json
import math
import operator
import os
import sys
from collections.abc import Iterator
from itertools import chain, compress, repeat
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError

MAX_SHOWN_KEY = 100  # characters of the key an error quotes
# Real JSON is a few levels deep (a safetensors header 3, a tokenizer.json or a config.json
# under 10, a chat row with tool schemas a dozen); 100 leaves room for those and for each
# recursive walker's frames per level (asdict takes two) below Python's recursion limit of
# 1,000. It is also below serde_json's default recursion limit of 128, with which the
# `tokenizers` library reads tokenizer.json: Python's json reads ~970 levels, so a
# tokenizer.json deeper than 127 passed every check here and then loaded in no tokenizer.
MAX_JSON_DEPTH = 100
# Objects and arrays a JSON file may hold unless its reader says otherwise: tens to
# thousands in a config.json, trainer_state.json, adapter or tokenizer config; 2**20 empty
# ones parse to about 100 MB, where a file of a few MB could otherwise hold millions.
DEFAULT_MAX_CONTAINERS = 1 << 20


class DuplicateKeyError(MfsdpFailedError, ValueError):
    """An object gave `key` twice; the message quotes it, cut short. Readers catch it with
    their "not valid JSON" handling (a ValueError) and name the file with the exit code
    they give a malformed one; its own kind (a failed check) is for any that does not."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {key!r:.{MAX_SHOWN_KEY}} appears twice")
        self.key = key


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """`json.loads`' object_pairs_hook: the object as a dict, or DuplicateKeyError. Built by
    `dict` in C and its length compared: a vocab of millions of keys costs what the parse
    does, not a Python step per key; the key given twice is looked for only then."""
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return found


class NestingError(MfsdpFailedError, ValueError):
    """JSON nested deeper than MAX_JSON_DEPTH (or than Python's json parses at all). A
    ValueError, as DuplicateKeyError is, so a caller's "not valid JSON" handling names the
    file; never a RecursionError, which readers would have to know to catch. Its own kind
    (a failed check) is for any reader that does not."""

    def __init__(self) -> None:
        super().__init__("nested too deeply")


def loads_unique(text: str | bytes) -> Any:
    """`json.loads` refusing an object that gives a key twice (DuplicateKeyError) or
    nesting deeper than MAX_JSON_DEPTH (NestingError). Both are ValueErrors, so a caller's
    "not valid JSON" handling names the file and says which.

    Python's cyclic garbage collector is paused while the text is parsed: each object and
    array parsed counts towards its next pass, and the passes over an ever larger heap took
    a third of parsing a 30 MB tokenizer.json, which holds no cycle to collect. It is paused
    inline, not by a context manager, whose generator costs more than the pause: this runs
    once per row of a data file."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        data = _decode(text)
    except RecursionError:
        raise NestingError() from None
    finally:
        if was_enabled:
            gc.enable()
    if _opening_brackets(text) > MAX_JSON_DEPTH and _deeper_than(data, MAX_JSON_DEPTH):
        raise NestingError()
    return data


# One decoder for every parse: `json.loads` with a hook builds a new one (and its scanner)
# per call, a cost paid again on every row of a data file, which is read a row at a time.
_DECODER = json.JSONDecoder(object_pairs_hook=unique_keys)


def _decode(text: str | bytes) -> Any:
    """`json.loads(text, object_pairs_hook=unique_keys)`, step for step (a str starting
    with a BOM refused, bytes decoded as UTF-8/16/32 by their first bytes), on `_DECODER`."""
    if isinstance(text, str):
        if text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    else:
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    return _DECODER.decode(text)


def _opening_brackets(text: str | bytes) -> int:
    """The `{` and `[` characters of `text` (those in strings too): no fewer than the
    objects and arrays it holds, counted without parsing it."""
    if isinstance(text, str):
        return text.count("{") + text.count("[")
    return text.count(b"{") + text.count(b"[")


def _deeper_than(data: object, limit: int) -> bool:
    """Whether parsed JSON nests objects and arrays more than `limit` deep (`[]` is 1 deep):
    whether its values `limit` levels down hold one, found without recursion."""
    for depth, level in enumerate(_levels(data)):
        if depth == limit:
            return any(_containers(level))
    return False


def _levels(data: object) -> Iterator[list[Any]]:
    """Parsed JSON a level at a time: `[data]`, then the values of its objects and arrays,
    and so on down. Each level is gathered and sorted by type in C (`_of_type`), never a
    Python step per value, so walking a 64 MB tokenizer.json's millions of vocab ids and
    merges costs a fraction of what parsing it did."""
    level: list[Any] = [data]
    while level:
        yield level
        objects, arrays = _containers(level)
        level = [*chain.from_iterable(arrays), *chain.from_iterable(map(dict.values, objects))]


def _containers(level: list[Any]) -> tuple[list[dict], list[list]]:
    """The objects and the arrays among parsed JSON values."""
    return _of_type(level, dict), _of_type(level, list)


def _of_type(values: list[Any], kind: type) -> list[Any]:
    """The values of `values` whose type is `kind` itself (parsed JSON holds no subclasses),
    picked in C."""
    return list(compress(values, map(operator.is_, map(type, values), repeat(kind))))


def too_many_containers(text: str | bytes, limit: int, holder: str = "this file") -> str | None:
    """Why `text` is not parsed, in words, when it may hold more than `limit` objects and
    arrays: its `{` and `[` characters (those in strings too, so never fewer), counted
    without parsing it; else None. `holder` names what `text` is ("a row": a line of a
    file)."""
    count = _opening_brackets(text)
    if count <= limit:
        return None
    return (
        f"{count} '{{' and '[' characters, more JSON objects and arrays than the {limit}"
        f" {holder} may hold: not parsed (each takes memory many times its size)"
    )


def json_problem(err: ValueError) -> str:
    """What is wrong with JSON text `loads_unique` refused, in words a user can act on. An
    integer past Python's digit limit raises a ValueError whose own advice
    (sys.set_int_max_str_digits) is no help to a user."""
    if isinstance(err, json.JSONDecodeError):
        joiner = " " if err.msg.endswith(" at") else " at "  # "Invalid control character at"
        return f"{err.msg}{joiner}line {err.lineno}, column {err.colno}"
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 text (byte {err.start})"
    if str(err).startswith("Exceeds the limit"):
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return str(err)[:200]


def parse_json(
    text: str | bytes,
    where: str,
    error: type[Exception],
    max_containers: int = DEFAULT_MAX_CONTAINERS,
) -> Any:
    """`loads_unique(text)`, or `error` in one line naming `where` for anything Python's
    json refuses: bad syntax, a key given twice, nesting past MAX_JSON_DEPTH, a 5,000-digit
    integer; and, before it is parsed, for a text that may hold more than `max_containers`
    objects and arrays (`too_many_containers`). Every JSON a user hands over is parsed
    here or through a reader built on it."""
    crowded = too_many_containers(text, max_containers)
    if crowded is not None:
        raise error(f"{where}: {crowded}")
    try:
        return loads_unique(text)
    except ValueError as err:
        raise error(f"{where}: not valid JSON ({json_problem(err)})") from None


def loads_object(
    text: str | bytes,
    where: str,
    error: type[Exception],
    max_containers: int = DEFAULT_MAX_CONTAINERS,
) -> dict:
    """The JSON object in `text` (each key once), else `error` in one line naming `where`:
    not valid JSON (`parse_json`, with `max_containers`), or another value than an object."""
    data = parse_json(text, where, error, max_containers)
    if not isinstance(data, dict):
        raise error(f"{where}: expected a JSON object, found {type(data).__name__}")
    return data


def read_json_file(
    path: str | os.PathLike,
    limit: int,
    error: type[Exception],
    root: str | os.PathLike | None = None,
    *,
    finite: bool = True,
) -> Any:
    """The JSON in a user's file, or `error` in one line naming it. The one safe way to read
    one: a regular file (never a FIFO or /dev/zero) of at most `limit` bytes, inside `root`
    when given (safe_files), parsed by `parse_json`, and with `finite` no NaN or Infinity
    (no JSON has them; Python reads them, and a model or adapter built from one computes
    NaN)."""
    try:
        text = safe_files.read_text(path, limit, root)
    except CheckpointFileError as err:
        raise error(str(err)) from None
    data = parse_json(text, str(path), error)
    found = first_nonfinite(data) if finite else None
    if found is not None:
        raise error(
            f"{path}: {found[0] or 'the value'} is {found[1]}, not a finite number (NaN and"
            " Infinity are not JSON)"
        )
    return data


def _walk(data: object) -> Iterator[tuple[str, object]]:
    """Every value of parsed JSON with its key path (`rope_scaling.factor`, `layers[1]`), in
    document order. Walked with a stack: the file is bounded, its depth is not."""
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        where, value = stack.pop()
        yield where, value
        if isinstance(value, dict):
            stack += [
                (f"{where}.{key}" if where else str(key), item) for key, item in value.items()
            ][::-1]
        elif isinstance(value, list):
            stack += [(f"{where}[{index}]", item) for index, item in enumerate(value)][::-1]


def first_nonfinite(data: object) -> tuple[str, float] | None:
    """The key path (`rope_scaling.factor`, `layer_scales[1]`) and value of the first NaN or
    +-Infinity in parsed JSON, else None. Python's json reads the literals (and 1e999 as
    inf), which RFC 8259 JSON has none of: `rms_norm_eps: NaN` would load and train on NaN,
    a `temperature: NaN` sample from nothing. Whether there is one is found first, in C
    steps (`_all_finite`), and only then where, a halving at a time: a 64 MB
    tokenizer.json is checked in a fraction of the time it takes to parse, where a Python
    step per value (and its key path) took several times that."""
    if _all_finite(data):
        return None
    where = ""
    while isinstance(data, (dict, list)):
        keys = list(data) if isinstance(data, dict) else None
        values = list(data.values()) if isinstance(data, dict) else data
        index = _first_not_finite(values)
        if keys is None:
            where = f"{where}[{index}]"
        else:
            where = f"{where}.{keys[index]}" if where else str(keys[index])
        data = values[index]
    return (where, data) if isinstance(data, float) else None


def _all_finite(data: object) -> bool:
    """Whether parsed JSON holds no NaN or +-Infinity: its floats, a level at a time
    (`_levels`), each tested in C."""
    return all(all(map(math.isfinite, _of_type(level, float))) for level in _levels(data))


def _first_not_finite(values: list[Any]) -> int:
    """The index of the first of `values` that holds a NaN or +-Infinity (one does),
    halving the range each step: about twice as many values read as `values` holds."""
    low, high = 0, len(values)
    while high - low > 1:
        middle = (low + high) // 2
        if _all_finite(values[low:middle]):
            low = middle
        else:
            high = middle
    return low


def first_lone_surrogate(data: object) -> tuple[str, int, str] | None:
    """Where the first lone UTF-16 surrogate (U+D800-U+DFFF) in parsed JSON is: its key path
    (`messages[0].content`; `key 'a\\ud800'` for a key), its character index and the
    character, else None. JSON's `\\ud800` escape without its pair reads as one; it is no
    text: UTF-8 cannot hold it, so parquet, a tokenizer or a terminal fails on it later."""
    for where, value in _walk(data):
        if isinstance(value, str):
            found = _surrogate_in(value)
            if found is not None:
                return where or "the value", found, value[found]
        elif isinstance(value, dict):
            for key in value:
                at = _surrogate_in(key) if isinstance(key, str) else None
                if at is not None:
                    return f"{where + ' ' if where else ''}key {cut_to(repr(key), 80)}", at, key[at]
    return None


def _surrogate_in(text: str) -> int | None:
    """The index of the first lone surrogate in `text`, else None (UTF-8 refuses exactly
    those: any other str encodes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return err.start
    return None


__all__ = [
    "DEFAULT_MAX_CONTAINERS",
    "MAX_JSON_DEPTH",
    "DuplicateKeyError",
    "NestingError",
    "first_lone_surrogate",
    "first_nonfinite",
    "json_problem",
    "loads_object",
    "loads_unique",
    "parse_json",
    "read_json_file",
    "too_many_containers",
    "unique_keys",
]
