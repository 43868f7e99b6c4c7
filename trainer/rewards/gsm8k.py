"""GSM8K: the answer is the number after the last `#### `, as the prompt suffix asks.

verl's strict rule, the one its `default_compute_score` uses (verl/utils/reward_score/gsm8k.py
as of verl-project/verl 1dda039b, 2026-08-22, unchanged since volcengine/verl b178a3cd): only
the last 300 characters are searched (a long response that wrote `#### 12` early and then kept
going gets no credit), for `#### ` (one space) and then a run of digits, `.` and `,` with an
optional leading `-`. The last one, its commas removed, must equal the ground truth as text:
`#### 72.0`, `#### 0072` and `#### 5.` do not match "72", "72" and "5", nor does `####72`. verl
also strips `$`, which the pattern never takes in, so `#### $72` has no answer. A wrong answer
in the format scores 0, as one with no answer does (verl's format_score 0). verl's `flexible`
mode (the last number anywhere) is not its default and is not used here.
"""

from __future__ import annotations

import re

CLIP_CHARS = 300
ANSWER = re.compile(r"#### (-?[0-9.,]+)")  # also how `data gsm8k` reads a ground truth


def extract_answer(solution_str: str) -> str | None:
    """The last `#### <number>` of the last CLIP_CHARS characters, commas removed, or None."""
    found = ANSWER.findall(solution_str[-CLIP_CHARS:])
    return found[-1].replace(",", "") if found else None


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 when the answer is the ground truth's text, else 0.0."""
    answer = extract_answer(solution_str)
    return 1.0 if answer is not None and answer == ground_truth else 0.0
