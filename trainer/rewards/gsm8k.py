"""GSM8K: the answer is the number after the last `####`, as the prompt suffix asks.

Only the last 300 characters are searched (verl's rule): a long response that happened to
write `#### 12` early and then kept going does not get credit for it. `strict` needs the
`#### <number>` format; `flexible` takes the last number anywhere in those characters.
Commas and dollar signs are stripped ("1,000", "$12") and numbers compare by value, so
"18.0" matches "18".
"""

from __future__ import annotations

import re

CLIP_CHARS = 300
_STRICT = re.compile(r"#### *(-?[$0-9.,]+)")
_NUMBER = re.compile(r"-?[$0-9.,]*[0-9]")


def _clean(number: str) -> str:
    return number.replace(",", "").replace("$", "").rstrip(".")


def extract_answer(solution_str: str, method: str = "strict") -> str | None:
    """The final answer as a plain number string, or None when there is none."""
    tail = solution_str[-CLIP_CHARS:]
    if method == "strict":
        found = _STRICT.findall(tail)
    elif method == "flexible":
        found = _NUMBER.findall(tail)
    else:
        raise ValueError(f"gsm8k method {method!r} is not 'strict' or 'flexible'")
    for candidate in reversed(found):
        cleaned = _clean(candidate)
        if cleaned not in ("", "-", "."):
            return cleaned
    return None


def same_number(answer: str, ground_truth: str) -> bool:
    """Equal as numbers when both parse, else as strings."""
    truth = _clean(str(ground_truth).strip())
    try:
        return float(answer) == float(truth)
    except ValueError:
        return answer == truth


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """`score` for the right answer, `format_score` for a wrong one in the format, 0 without one."""
    answer = extract_answer(solution_str, method)
    if answer is None:
        return 0.0
    return score if same_number(answer, ground_truth) else format_score
