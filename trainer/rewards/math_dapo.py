"""DAPO's rule (verl's `math_dapo`): the rest of the last `Answer:` line, else the last box.

As verl/utils/reward_score/math_dapo.py scores as of verl-project/verl 1dda039b (2026-08-22,
with bf48903d9's fallback to the box), for the sources trainer/rewards/dispatch.py routes to it.

Only the response's last 300 characters are searched, for `Answer` (any case), optional
spaces, `:` and the rest of that line; without one the answer is `[INVALID]`. The answer and
the ground truth are both normalized as verl's `normalize_final_answer` does (Minerva's rules:
the part after the last `=`, units and TeX decorations dropped, shorthand `\\frac12` and
`\\sqrt2` braced, commas out of a whole number) and compared as text. Where the normalized
answer is `[INVALID]` (no `Answer:` line, or one that normalizes to that), the response's box
decides if it has one: the content of the last `\\boxed{` in its last 100 characters up to
the `}` that closes it, compared with the ground truth exactly as given, not normalized. With
neither, the `[INVALID]` answer is compared as any other (wrong, but for a ground truth that
normalizes to it). +1.0 when equal, -1.0 otherwise, the scores verl returns (a wrong answer
costs, unlike the GSM8K and MATH rules' 0). verl's `strict_box_verify` mode (the box alone) is
not its default and is not used here.
"""

from __future__ import annotations

import re

from trainer.rewards.math import braced

CLIP_CHARS = 300
BOX_CHARS = 100  # the box is looked for only this near the end
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
# verl writes the next steps as regular expressions: `.*?\$(.*?)\$.*` (a line with two `$`
# becomes `$` + what lies between its first two + `$`), `\\text\{(.*?)\}` for \text{},
# \textbf{} and \overline{} (each unwrapped up to the first `}` after it), `\\boxed\{(.*)\}`
# (from the first \boxed{ of a line to the line's last `}`), then `frac([^{])(.)` and
# `sqrt([^{])`. None of them lets `.` take a line break, so each works line by line. The first
# five are written out here, one pass over the text each: as patterns they backtrack, and a
# line with one `$`, or many `\text{` or `\boxed{` and no `}`, took time quadratic in its
# length (a 10,000-character ground truth 1.6 s, a megabyte hours). The last two never
# backtrack.
_UNWRAPPED = ("\\text{", "\\textbf{", "\\overline{")
_BOXED = "\\boxed{"
_BRACED = (
    (re.compile(r"frac([^{])(.)"), r"frac{\1}{\2}"),
    (re.compile(r"sqrt([^{])"), r"sqrt{\1}"),
)


def _first_dollar_pair(line: str) -> str:
    """verl's `.*?\\$(.*?)\\$.*` on one line: `$...$` of its first two `$`, or the line."""
    first = line.find("$")
    second = line.find("$", first + 1) if first >= 0 else -1
    return line if second < 0 else f"${line[first + 1 : second]}$"


def _unwrapped(line: str, opener: str) -> str:
    """verl's `opener(.*?)\\}` on one line: each `opener` with a `}` after it, left to right,
    not overlapping, becomes what lies between them. Where one has no `}` after it, no later
    one has either."""
    pieces: list[str] = []
    done = 0
    while (start := line.find(opener, done)) >= 0:
        close = line.find("}", start + len(opener))
        if close < 0:
            break
        pieces += (line[done:start], line[start + len(opener) : close])
        done = close + 1
    pieces.append(line[done:])
    return "".join(pieces)


def _unboxed(line: str) -> str:
    """verl's `\\\\boxed\\{(.*)\\}` on one line: from its first `\\boxed{` to its last `}`,
    the content kept; a line without a `}` after its first `\\boxed{` stays as it is."""
    start = line.find(_BOXED)
    close = line.rfind("}")
    if start < 0 or close < start + len(_BOXED):
        return line
    return line[:start] + line[start + len(_BOXED) : close] + line[close + 1 :]


def _rewritten_line(line: str) -> str:
    line = _first_dollar_pair(line)
    for opener in _UNWRAPPED:
        line = _unwrapped(line, opener)
    return _unboxed(line)


def normalize(answer: str) -> str:
    """`answer` in the canonical text form both sides are compared in, as verl's
    `normalize_final_answer` writes it, in time linear in its length."""
    text = answer.split("=")[-1]
    for old, new in _REPLACED:
        text = text.replace(old, new)
    for dropped in _DROPPED:
        text = text.replace(dropped, "")
    text = "\n".join(_rewritten_line(line) for line in text.split("\n"))
    for pattern, replacement in _BRACED:
        text = pattern.sub(replacement, text)
    text = text.replace("$", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def extract_answer(solution_str: str) -> str:
    """The rest of the last `Answer:` line in the last CLIP_CHARS characters, or NO_ANSWER."""
    found = _ANSWER.findall(solution_str[-CLIP_CHARS:])
    return found[-1] if found else NO_ANSWER


def boxed_answer(solution_str: str) -> str | None:
    """The content of the last `\\boxed{` in the last BOX_CHARS characters, inner braces
    counted, or None where there is none or it is never closed (an earlier box is not read)."""
    tail = solution_str[-BOX_CHARS:]
    start = tail.rfind(_BOXED)
    return None if start < 0 else braced(tail, start + len(_BOXED) - 1)


def compute_score(solution_str: str, ground_truth: str) -> float:
    """CORRECT when the normalized answer equals the normalized ground truth, or, with no
    answer, the box equals the ground truth as given; else WRONG."""
    answer = normalize(extract_answer(solution_str))
    if answer == NO_ANSWER and (box := boxed_answer(solution_str)) is not None:
        return CORRECT if box == ground_truth else WRONG
    return CORRECT if answer == normalize(ground_truth) else WRONG
