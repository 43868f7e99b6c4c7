"""DAPO's rule (verl's `math_dapo`): the answer is the rest of the last `Answer:` line.

As verl/utils/reward_score/math_dapo.py scores (verl 0.8.0.dev, commit b178a3cd), for the
sources trainer/rewards/dispatch.py routes to it.

Only the response's last 300 characters are searched, for `Answer` (any case), optional
spaces, `:` and the rest of that line; without one the answer is `[INVALID]`, which is wrong.
The answer and the ground truth are both normalized as verl's `normalize_final_answer` does
(Minerva's rules: the part after the last `=`, units and TeX decorations dropped, shorthand
`\\frac12` and `\\sqrt2` braced, commas out of a whole number) and compared as text: +1.0 when
equal, -1.0 otherwise, the scores verl returns (a wrong answer costs, unlike the GSM8K and MATH
rules' 0). verl's `strict_box_verify` mode is not its default and is not used here.
"""

from __future__ import annotations

import re

CLIP_CHARS = 300
NO_ANSWER = "[INVALID]"
CORRECT, WRONG = 1.0, -1.0
_ANSWER = re.compile(r"Answer\s*:\s*([^\n]+)", re.IGNORECASE)

# Replaced in this order, then `_DROPPED` removed in its order (verl's SUBSTITUTIONS and
# REMOVED_EXPRESSIONS): the order matters, `\text{m}` becomes `\text{}` before that goes.
_REPLACED = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
_DROPPED = (
    *("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units"),
    *("\\ldots", "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm"),
    *("gm", "pounds", "meters", "meals", "edges", "students", "childrentickets", "multiples"),
    *("\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}"),
    *("\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots"),
)
# (pattern, replacement) applied in order: the first `$...$` of a line, the contents of
# \text{}, \textbf{}, \overline{} and the outermost \boxed{}, then shorthand \frac and \sqrt
_REWRITTEN = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r".*?\$(.*?)\$.*", r"$\1$"),
        (r"\\text\{(.*?)\}", r"\1"),
        (r"\\textbf\{(.*?)\}", r"\1"),
        (r"\\overline\{(.*?)\}", r"\1"),
        (r"\\boxed\{(.*)\}", r"\1"),
        (r"frac([^{])(.)", r"frac{\1}{\2}"),
        (r"sqrt([^{])", r"sqrt{\1}"),
    )
)


def normalize(answer: str) -> str:
    """`answer` in the canonical text form both sides are compared in."""
    text = answer.split("=")[-1]
    for old, new in _REPLACED:
        text = text.replace(old, new)
    for dropped in _DROPPED:
        text = text.replace(dropped, "")
    for pattern, replacement in _REWRITTEN:
        text = pattern.sub(replacement, text)
    text = text.replace("$", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def extract_answer(solution_str: str) -> str:
    """The rest of the last `Answer:` line in the last CLIP_CHARS characters, or NO_ANSWER."""
    found = _ANSWER.findall(solution_str[-CLIP_CHARS:])
    return found[-1] if found else NO_ANSWER


def compute_score(solution_str: str, ground_truth: str) -> float:
    """CORRECT when the normalized answer equals the normalized ground truth, else WRONG."""
    same = normalize(extract_answer(solution_str)) == normalize(ground_truth)
    return CORRECT if same else WRONG
