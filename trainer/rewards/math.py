"""MATH: the answer is the content of the last `\\boxed{...}` (as verl reads it:
`boxed_answer`), compared after normalization.

The normalization follows the MATH benchmark's equivalence rules (Hendrycks et al.), so
`\\dfrac12`, `\\frac{1}{2}`, `0.5` and `1/2` are the same answer and `x = 3`, `3^\\circ` or
`\\text{3 inches}` style decorations do not cost the score. When the optional `math-verify`
package is installed it is asked too, which also catches symbolic equivalences
(`2\\sqrt{2}` vs `\\sqrt{8}`); it can only add matches, never remove one.
"""

from __future__ import annotations

import re

_BOXED = "\\boxed"
_SPACED_BOXED = "\\boxed "


def boxed_answer(text: str, what: str = "text") -> str:
    """The answer in `text`'s box exactly as verl reads one, in its MATH reward and its MATH
    preprocessing alike (`remove_boxed(last_boxed_only_string(text))`,
    verl/utils/reward_score/math.py): a `\\boxed ` (space) anywhere wins, the answer what
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
    depth = 0
    for position in range(brace, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : position]
    raise ValueError(f"{what}'s last \\boxed{{ is never closed")


def last_boxed(text: str) -> str | None:
    """`text`'s boxed answer as verl reads it (`boxed_answer`), or None where verl reads none
    (its reward then scores 0)."""
    try:
        return boxed_answer(text)
    except ValueError:
        return None


def _braced_fractions(text: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{2}` -> `\\frac{1}{2}`."""
    pieces = text.split("\\frac")
    out = pieces[0]
    for piece in pieces[1:]:
        out += "\\frac"
        if piece.startswith("{") or len(piece) < 2:
            out += piece
            continue
        numerator, rest = piece[0], piece[1:]
        if rest.startswith("{"):
            out += "{" + numerator + "}" + rest
        else:
            out += "{" + numerator + "}{" + rest[0] + "}" + rest[1:]
    return out


def _slash_fraction(text: str) -> str:
    """`3/4` (integers only) -> `\\frac{3}{4}`."""
    match = re.fullmatch(r"(-?\d+)/(\d+)", text)
    return f"\\frac{{{match.group(1)}}}{{{match.group(2)}}}" if match else text


def _braced_sqrt(text: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}`."""
    return re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", text)


def normalize(answer: str) -> str:
    """Canonical string form of a MATH answer."""
    text = answer.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "")
    text = text.replace("\\$", "").replace("$", "")
    text = re.sub(r"\\text\{\s*[a-zA-Z ]*\}$", "", text.strip()) if re.search(r"\d", text) else text
    text = re.sub(r"\\(?:text|mbox|mathrm)\{([^}]*)\}", r"\1", text)
    text = text.replace("\\%", "").replace("%", "")
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if text.startswith("."):
        text = "0" + text
    parts = text.split("=")
    if len(parts) == 2 and len(parts[0].strip()) <= 2:
        text = parts[1]
    text = _braced_sqrt(text).replace(" ", "")
    text = _braced_fractions(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    text = _slash_fraction(text)
    if re.fullmatch(r"-?\d+\.0+", text):
        text = text.split(".")[0]
    return text


def _math_verify_equal(answer: str, ground_truth: str) -> bool:
    try:
        from math_verify import parse, verify
    except ImportError:
        return False
    try:
        return bool(verify(parse(f"\\boxed{{{ground_truth}}}"), parse(f"\\boxed{{{answer}}}")))
    except Exception:  # math-verify raises on unparsable input and on its own timeouts
        return False


def is_equiv(answer: str, ground_truth: str) -> bool:
    if normalize(answer) == normalize(ground_truth):
        return True
    return _math_verify_equal(answer, ground_truth)


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 when the last boxed answer equals the ground truth, else 0.0."""
    answer = last_boxed(solution_str)
    if answer is None:
        return 0.0
    truth = last_boxed(ground_truth) or ground_truth
    return 1.0 if is_equiv(answer, truth) else 0.0
