"""MATH: verl's MATH reward (verl/utils/reward_score/math_reward.py as of verl-project/verl
1dda039b, 2026-08-22, unchanged since volcengine/verl b178a3cd), the rule verl's
`default_compute_score` routes lighteval/MATH, DigitalLearningGmbH/MATH-lighteval and
HuggingFaceH4/MATH-500 to. The answer is the content of the last `\\boxed{...}` (as verl reads
it: `boxed_answer`), compared as text with the ground truth as the row gives it, both first put
through the MATH benchmark's string normalization (Hendrycks et al.) step for step in verl's
order (`normalize`); where that normalization fails on either, the two are compared unchanged.

Only verl's rule, so rewards and validation accuracy are those verl gives for the same data:
no further leniency (`72.0` is not `72`, `50%` not `50`, `\\text{A}` not `A`, a boxed ground
truth is not unboxed), and no symbolic equivalence (verl's default leaves math-verify out), so
what is installed never changes a reward.
"""

from __future__ import annotations

from mfsdp_ckpt.errors import MfsdpFailedError

_BOXED = "\\boxed"
_SPACED_BOXED = "\\boxed "


def boxed_answer(text: str, what: str = "text") -> str:
    """The answer in `text`'s box exactly as verl reads one, in its MATH reward and its MATH
    preprocessing alike (`remove_boxed(last_boxed_only_string(text))`,
    verl/utils/reward_score/math_reward.py): a `\\boxed ` (space) anywhere wins, the answer what
    follows the last one up to a `$`, as written; else the content of the last `\\boxed{...}`,
    braces balanced. One reader for both, so a response is scored by the rule its row's
    ground truth was taken by. Where verl reads none (no `\\boxed`: it reads no `\\fbox`; a
    last `\\boxed` without `{`; a brace never closed) ValueError says which, naming `what`."""
    if _SPACED_BOXED in text:
        return text.split(_SPACED_BOXED)[-1].split("$")[0]
    start = text.rfind(_BOXED)
    if start < 0:
        raise ValueError(f"{what} has no \\boxed{{...}} answer (verl reads no \\fbox)")
    brace = start + len(_BOXED)
    if not text.startswith("{", brace):
        raise ValueError(f"{what}'s last \\boxed is not followed by '{{'")
    content = braced(text, brace)
    if content is None:
        raise ValueError(f"{what}'s last \\boxed{{ is never closed")
    return content


def braced(text: str, brace: int) -> str | None:
    """What lies between the `{` at `brace` and the `}` that closes it, inner braces counted
    (`{\\frac{1}{2}}` -> `\\frac{1}{2}`), or None where it is never closed: how verl's
    `last_boxed_only_string` reads a box, in its MATH and DAPO rules alike."""
    depth = 0
    for position in range(brace, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : position]
    return None


def last_boxed(text: str) -> str | None:
    """`text`'s boxed answer as verl reads it (`boxed_answer`), or None where verl reads none
    (its reward then scores 0)."""
    try:
        return boxed_answer(text)
    except ValueError:
        return None


class _NotNormalizable(MfsdpFailedError, ValueError):
    """verl's normalization fails on this text (a `\\sqrt` or `\\frac` with nothing after
    it, a second `\\text{ `): verl then compares the two answers unchanged. It never leaves
    `is_equiv`; its kind is the project's rule for every error class."""


# The plain substitutions of verl's normalization, in its order, before and after its removal
# of units: line breaks, `\!` spaces, `\\` for `\`, `\tfrac` and `\dfrac` for `\frac`,
# `\left` and `\right`, degrees, `\$`; then `\%` and a leading 0 for a number like ` .5`.
_REWRITES_BEFORE_UNITS = (
    ("\n", ""),
    ("\\!", ""),
    ("\\\\", "\\"),
    ("tfrac", "frac"),
    ("dfrac", "frac"),
    ("\\left", ""),
    ("\\right", ""),
    ("^{\\circ}", ""),
    ("^\\circ", ""),
    ("\\$", ""),
)
_REWRITES_AFTER_UNITS = (("\\\\%", ""), ("\\%", ""), (" .", " 0."), ("{.", "{0."))
_UNITS = "\\text{ "  # in MATH answers a `\text{ ` (with the space) starts the units
_SHORT_LEFT_SIDE = 2  # `k = 3`, `x =3`: the left side of one `=` this long or shorter goes


def _rewritten(text: str, rewrites: tuple[tuple[str, str], ...]) -> str:
    for old, new in rewrites:
        text = text.replace(old, new)
    return text


def _without_units(text: str) -> str:
    """What comes before `\\text{ `, whatever follows it (`5\\text{ cm}^2` -> `5`); a second
    one fails the normalization."""
    if _UNITS not in text:
        return text
    pieces = text.split(_UNITS)
    if len(pieces) != 2:
        raise _NotNormalizable(f"{len(pieces) - 1} units")
    return pieces[0]


def _without_short_left_side(text: str) -> str:
    """`k = 3` -> ` 3`: the right side of the one `=` when the left side, spaces counted, is
    at most 2 characters (`xy = 3` stays)."""
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= _SHORT_LEFT_SIDE:
        return sides[1]
    return text


def _braced_sqrt(text: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}`: the one character after an unbraced `\\sqrt` is braced,
    whatever it is."""
    pieces = text.split("\\sqrt")
    out = [pieces[0]]  # joined once: `+=` on a string may copy it for every piece
    for piece in pieces[1:]:
        if not piece:
            raise _NotNormalizable("\\sqrt with nothing after it")
        out += ("\\sqrt", piece if piece.startswith("{") else "{" + piece[0] + "}" + piece[1:])
    return "".join(out)


def _braced_fractions(text: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{2}` -> `\\frac{1}{2}`: the first one or two
    characters after an unbraced `\\frac` are braced; a `\\frac` with one character after it
    leaves the whole text as it is."""
    pieces = text.split("\\frac")
    out = [pieces[0]]  # joined once, as in `_braced_sqrt`
    for piece in pieces[1:]:
        if not piece:
            raise _NotNormalizable("\\frac with nothing after it")
        if piece.startswith("{"):
            out += ("\\frac", piece)
        elif len(piece) == 1:
            return text
        elif piece[1] == "{":
            out += ("\\frac{", piece[0], "}", piece[1:])
        else:
            out += ("\\frac{", piece[0], "}{", piece[1], "}", piece[2:])
    return "".join(out)


def _is_plain_integer(text: str) -> bool:
    """`-3`, `0`, `12`: an integer written as Python writes one (not `03`, `+3`, `-0`)."""
    try:
        return str(int(text)) == text
    except ValueError:
        return False


def _slash_fraction(text: str) -> str:
    """`3/4` -> `\\frac{3}{4}` when the text is two plain integers around one `/`."""
    sides = text.split("/")
    if len(sides) == 2 and all(_is_plain_integer(side) for side in sides):
        return f"\\frac{{{sides[0]}}}{{{sides[1]}}}"
    return text


def normalize(answer: str) -> str:
    """The MATH answer as verl's normalization writes it (`strip_string`): its steps in its
    order, so equal results are exactly the answers verl counts equal. Raises
    `_NotNormalizable` where verl's normalization fails."""
    text = _without_units(_rewritten(answer, _REWRITES_BEFORE_UNITS))
    text = _rewritten(text, _REWRITES_AFTER_UNITS)
    if not text:
        return text
    if text.startswith("."):
        text = "0" + text
    text = _braced_sqrt(_without_short_left_side(text)).replace(" ", "")
    text = _braced_fractions(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _slash_fraction(text)


def is_equiv(answer: str, ground_truth: str) -> bool:
    """Equal after normalization, or, where normalizing either fails, equal as written."""
    try:
        return normalize(answer) == normalize(ground_truth)
    except _NotNormalizable:
        return answer == ground_truth


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 when the last boxed answer equals the ground truth (taken as given), else 0.0."""
    answer = last_boxed(solution_str)
    if answer is None:
        return 0.0
    return 1.0 if is_equiv(answer, ground_truth) else 0.0
