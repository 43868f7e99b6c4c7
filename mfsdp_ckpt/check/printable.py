"""Text from a checkpoint, made safe to print on a terminal: one function, used everywhere.

Tensor names, file names and messages that quote them come from files anyone may have
crafted. Printed raw, an ANSI escape recolours or clears the terminal, a newline forges a
line of its own (`valid: ...` under an INVALID verdict), a bidi override reorders what the
reader sees, and a 200,000-character name fills the screen (or a log) with one line.
A letter from another script that looks like an ASCII one, in a name that is otherwise
ASCII, makes two names read as one. `printable` writes every such character as a Python-style
escape and caps the length;
`--json` output needs only the cap (`cut_to`: json.dumps escapes control characters itself).

`error_line` is the one way an exception becomes part of such a line: a library's message
may be a page (a traceback, a whole config) or megabytes on its first line, and `said_by` the
one way its text is read at all; `torch_load_reason` the one way a failed `torch.load` is
said. `first_of` is the
one way a line names some of many items: the first few, then how many more there are.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from itertools import groupby

MAX_PRINTED_CHARS = 2000  # one printed line; real tensor names and paths are far shorter
MAX_ERROR_CHARS = 300  # what an exception adds to a line: its gist, never a page of it


def escaped(char: str) -> str:
    """`char` as the escape every output writes it as: a byte of a path `os.fsdecode` could
    not decode (its surrogateescape surrogate, U+DC80..U+DCFF) as that byte, `\\xff`; any
    other character as Python writes it (`\\x1b`, `\\u202e`, `\\U000e0001`). The one rule
    `printable` and the JSON output (`cli.json_text.shown_bytes`) share, so a text line and
    a JSON string say the same of one path."""
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a path os.fsdecode could not decode
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def cut_to(text: str, limit: int = MAX_PRINTED_CHARS) -> str:
    """`text` cut to `limit` characters: its start and end, with a note of how many were left
    out between them (a path leads an error line and the reason closes it). The one length
    rule of every message, printed (`printable`) or in --json output, so the two outputs of
    one command say the same."""
    cut = max(0, len(text) - limit)
    if not cut:
        return text
    return f"{text[: limit // 2]}…(+{cut} chars)…{text[len(text) - (limit - limit // 2) :]}"


def printable(text: object, limit: int = MAX_PRINTED_CHARS, *, lookalikes: bool = True) -> str:
    """`text` with every character str.isprintable() rejects (controls, escapes, line and paragraph
    separators, bidi and other format characters, unassigned code points) written as `\\x1b`,
    `\\u202e`, ..., and every lookalike of an ASCII character (`_lookalikes_escaped`) so
    too, cut to `limit` characters (its start and end, with a note of how many were left out
    between them). `lookalikes=False` leaves those as they are: for a JSON field, which a
    program reads and whose names must stay the real ones (a path it opens)."""
    text = cut_to(str(text), limit)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else escaped(c) for c in text)
    if lookalikes and not text.isascii():
        text = _lookalikes_escaped(text)
    return text


# Letters that print as nothing (Hangul fillers): always escaped, and no other script's
# writing, so one beside fullwidth digits does not pass them for a Korean name.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")
# Scripts whose letters pass for Latin ones (a Cyrillic o, U+043E; a Greek omicron, U+03BF).
_LOOKALIKE_SCRIPTS = ("CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC")


def _lookalikes_escaped(text: str) -> str:
    """`text` with each character that passes for an ASCII one written as its escape:
    one whose compatibility form is ASCII (a fullwidth n, U+FF4E; a mathematical bold A) in a
    part of a name written in no other script (`[\\uff4eorm]`, `global_step_\\uff12`), and,
    in a part that holds ASCII letters, a letter of a script that looks Latin or a combining
    mark (`n\\u043erm`, `norme\\u0301`). Real tensor names are ASCII: a name holding a
    Cyrillic o printed as is reads as `model.norm.weight`, and validate then said that name
    was both missing and present. A part written in another script (a Cyrillic or Chinese
    directory name, digits beside it included) and accented Latin (`josé`) print as they
    are."""
    printed = []
    for in_name, run in groupby(text, _in_a_name_part):
        found = "".join(run)
        if not in_name:  # punctuation between parts (`…`, `—`) passes for no name
            printed.append(found)
            continue
        latin = any(c.isascii() and c.isalpha() for c in found)
        native = any(
            not c.isascii() and c not in _BLANK_LETTERS and not _compatible_with_ascii(c)
            for c in found
        )
        printed += [escaped(c) if _passes_for_ascii(c, latin, native) else c for c in found]
    return "".join(printed)


def _in_a_name_part(char: str) -> bool:
    """Whether `char` belongs to a part of a tensor name, key or path (`norm` of
    `model.norm.weight`, `run` of `/data/run`): a letter, a digit or a combining mark."""
    return char.isalnum() or unicodedata.category(char).startswith("M")


def _compatible_with_ascii(char: str) -> bool:
    """Whether `char`'s compatibility form is ASCII (a fullwidth or mathematical letter or
    digit: `\\uff12` is 2)."""
    return unicodedata.normalize("NFKC", char).isascii()


def _passes_for_ascii(char: str, latin: bool, native: bool) -> bool:
    """Whether non-ASCII `char`, in a part of a name holding ASCII letters (`latin`) and
    characters of another script (`native`) or not, reads as an ASCII character: by its
    compatibility form where no other script is written, or, among ASCII letters, as a
    Latin-looking script's letter or a mark over the one before."""
    if char.isascii():
        return False
    if char in _BLANK_LETTERS:
        return True
    if _compatible_with_ascii(char):
        return not native
    if not latin:
        return False
    if unicodedata.category(char).startswith("M"):
        return True
    return unicodedata.name(char, "").startswith(_LOOKALIKE_SCRIPTS)


# What an exception says when its own `__str__` fails (a user's class with a typo in it)
STR_FAILED = "<str() failed>"


def said_by(err: BaseException) -> str:
    """`str(err)`, or `STR_FAILED` when that raises: the exception's class is anyone's code (a
    reward function's), and a `__str__` that fails turned a one-line error into a traceback
    raised while reporting it."""
    try:
        return str(err)
    except Exception:  # whatever the user's __str__ raises; Ctrl-C passes
        return STR_FAILED


def error_line(
    err: BaseException,
    *,
    with_type: bool = True,
    joined: bool = False,
    limit: int = MAX_ERROR_CHARS,
) -> str:
    """`err` as `Type: message` (`message` alone without `with_type`; the type's name when it
    says nothing), for an error line that quotes it: its first line, ` ...` marking that more
    followed, or with `joined` all its lines joined by spaces (for libraries that put the
    reason below a heading); cut to `limit` characters and made `printable`, as a library's
    message may quote a file's contents."""
    name = printable(type(err).__name__, limit)
    text = said_by(err)
    if joined:
        said = " ".join(text.split())
    else:
        lines = text.strip().splitlines()
        said = f"{lines[0].rstrip()} ..." if len(lines) > 1 else "".join(lines)
    if not said:
        return name
    said = printable(said, limit)
    return f"{name}: {said}" if with_type else said


# torch.load(weights_only=True) wraps its unpickler's own error in a page that begins so and
# advises loading the file with weights_only=False, which runs whatever code it holds.
_TORCH_REFUSAL = "Weights only load failed"
_TORCH_REASON_MARK = "WeightsUnpickler error:"
_REFUSED_GLOBAL = re.compile(r"\bGLOBAL (\S+) (?:was not an allowed|whose module)")


def is_torch_refusal(err: BaseException) -> bool:
    """Whether `err` is torch.load(weights_only=True)'s refusal: its unpickler's reason
    wrapped in that page (`torch_load_reason` says the reason alone)."""
    return said_by(err).startswith(_TORCH_REFUSAL)


def torch_load_reason(err: BaseException, limit: int = MAX_ERROR_CHARS) -> str:
    """Why torch.load(weights_only=True) failed, for the line naming the file and key:
    `damaged pickle (Unsupported operand 149)`, or `refusing to load global os.system` (the
    words the restricted reader uses), from the unpickler's own reason; never torch's page of
    advice around it, which suggests loading an untrusted file unsafely and, cut to a line,
    read as noise. Any other failure (a record missing from the archive, ...) is
    `unreadable blob (Type: its first line)`."""
    if not is_torch_refusal(err):
        return f"unreadable blob ({error_line(err, limit=limit)})"
    inner = err.__context__  # torch raises its page `from None`: the unpickler's error stays here
    said = said_by(inner) if inner is not None else said_by(err).rpartition(_TORCH_REASON_MARK)[2]
    said = " ".join(said.split()).split(". ")[0].rstrip(".")  # its first sentence: the reason
    refused = _REFUSED_GLOBAL.search(said)
    if refused:
        return f"refusing to load global {printable(refused[1], limit)}"
    return f"damaged pickle ({printable(said, limit) or type(err).__name__})"


def first_of(items: Sequence[object], shown: int, sep: str = ", ") -> str:
    """The first `shown` of `items` joined by `sep`, then ` (+N more)` when N were left out:
    an error line names enough of a long list to act on (the first mismatch, a few layers) and
    says the list goes on, without growing with it."""
    said = sep.join(str(item) for item in items[:shown])
    left = len(items) - shown
    return f"{said} (+{left} more)" if left > 0 else said


__all__ = [
    "MAX_ERROR_CHARS",
    "MAX_PRINTED_CHARS",
    "STR_FAILED",
    "cut_to",
    "error_line",
    "escaped",
    "first_of",
    "is_torch_refusal",
    "printable",
    "said_by",
    "torch_load_reason",
]
