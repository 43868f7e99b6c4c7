"""The built-in rules score a long or hostile ground truth or response in time linear in its
length, with the results verl's rules give.

Were: the DAPO rule normalized a ground truth with verl's regular expressions, which backtrack:
a line with one `$`, or many `\\text{` or `\\boxed{` and no `}`, took time quadratic in its
length (10,000 characters 1.6 s, one megabyte about three hours, on every rollout of every
step, with no message and no time limit).

`verl_normalize_final_answer` below is verl's `normalize_final_answer` as verl writes it down
(verl/utils/reward_score/math_dapo.py at b178a3cd), its regular expressions included; the
DAPO rule must agree with it on every text, and finish a megabyte of each hostile shape within
a bound hours below what the quadratic took.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from trainer.rewards import gsm8k, math, math_dapo

# verl's SUBSTITUTIONS and REMOVED_EXPRESSIONS
VERL_SUBSTITUTIONS = [
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    (r"\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
]
VERL_REMOVED = [
    *("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units"),
    *("\\ldots", "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm"),
    *("gm", "pounds", "meters", "meals", "edges", "students", "childrentickets", "multiples"),
    *("\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}"),
    *("\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots"),
]


def verl_normalize_final_answer(final_answer: str) -> str:
    final_answer = final_answer.split("=")[-1]
    for before, after in VERL_SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for expr in VERL_REMOVED:
        final_answer = final_answer.replace(expr, "")
    final_answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", final_answer)
    final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", final_answer)
    final_answer = final_answer.replace("$", "")
    if final_answer.replace(",", "").isdigit():
        final_answer = final_answer.replace(",", "")
    return final_answer.strip()


# What the rewritten steps turn on: every opener, brace, `$` and line break, among plain text
_PIECES = [
    *("$", "$", "\\$", "{", "}", "}", "\n", "\\text{", "\\textbf{", "\\overline{"),
    *("\\boxed{", "frac", "sqrt", "\\frac", "=", ",", " ", ".", "a ", "1", "2", "x", "cm"),
]


def _random_text(rng: random.Random, pieces: int) -> str:
    return "".join(rng.choice(_PIECES) for _ in range(rng.randrange(pieces)))


def test_the_dapo_normalization_is_verls_on_random_texts():
    rng = random.Random(24)
    for _ in range(20_000):
        text = _random_text(rng, 40)
        assert math_dapo.normalize(text) == verl_normalize_final_answer(text), repr(text)


# Long texts of the shapes verl's patterns backtrack on, and a few that they rewrite
HOSTILE = [
    "1," * 1500,
    "$" + "x" * 3000,
    "\\text{" * 600,
    "\\textbf{" * 400 + "}",
    "\\overline{" * 300 + "\n}" * 300,
    "\\boxed{" * 500,
    "\\boxed{" * 400 + "}" + "\\boxed{" * 100,
    "a$1$b\\text{c}d\\boxed{e}f\n" * 200,
    "$\n" * 1500,
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_the_dapo_normalization_is_verls_on_long_hostile_texts(text):
    assert math_dapo.normalize(text) == verl_normalize_final_answer(text)


MEGABYTE = 1 << 20
BOUND_S = 10.0  # a megabyte of each took minutes to hours before; well under 1 s now


def _timed(score, *args):
    start = time.perf_counter()
    result = score(*args)
    return result, time.perf_counter() - start


# (ground truth of about `size` characters, its normalization) for each hostile shape
DAPO_TRUTHS = {
    "commas": lambda size: ("1," * (size // 2), "1" * (size // 2)),  # a whole number's
    "one dollar": lambda size: ("$" + "7" * size, "7" * size),  # the line stays, `$` goes
    "open text": lambda size: ("\\text{" * (size // 6),) * 2,  # never closed: stays
    "open boxed": lambda size: ("\\boxed{" * (size // 7),) * 2,
    "boxed": lambda size: ("\\boxed{" * (size // 7) + "}", "\\boxed{" * (size // 7 - 1)),
    "dollar pairs": lambda size: ("$1$\\text{2}" * (size // 12), "1"),  # the line's first
}


# 64 KiB first: where the time is quadratic it fails within minutes, not hours
@pytest.mark.parametrize("size", [MEGABYTE // 16, MEGABYTE], ids=["64KiB", "1MiB"])
@pytest.mark.parametrize("shape", list(DAPO_TRUTHS))
def test_a_long_ground_truth_is_scored_by_dapo_in_linear_time(size, shape):
    truth, normalized = DAPO_TRUTHS[shape](size)
    assert math_dapo.normalize(truth) == normalized
    score, took = _timed(math_dapo.compute_score, f"Answer: {normalized[-200:]}", truth)
    assert score == (math_dapo.CORRECT if len(normalized) <= 200 else math_dapo.WRONG)
    assert took < BOUND_S


def test_a_megabyte_response_or_ground_truth_is_scored_by_math_in_linear_time():
    for text in ("\\sqrt1" * (MEGABYTE // 6), "\\frac12" * (MEGABYTE // 7), "{}" * (MEGABYTE // 2)):
        score, took = _timed(math.compute_score, f"\\boxed{{{text}}}", text)
        assert score == 1.0
        assert took < BOUND_S
    score, took = _timed(math.compute_score, "\\boxed{" * (MEGABYTE // 7), "1")
    assert score == 0.0  # the last box is never closed: verl reads no answer
    assert took < BOUND_S


def test_a_megabyte_response_is_scored_by_gsm8k_in_linear_time():
    score, took = _timed(gsm8k.compute_score, "#### 1" * MEGABYTE + "#### 72", "72")
    assert score == 1.0
    assert took < BOUND_S
