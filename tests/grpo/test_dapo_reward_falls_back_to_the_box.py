"""The DAPO rule reads the response's last `\\boxed{}` where it finds no `Answer:` line, as verl
scores since bf48903d9 (2026-08-14): the box's content, braces balanced, in the last 100
characters, equal to the ground truth as given.

Were: a response with a box and no `Answer:` line scored -1.0 for a right answer
(`So the total is \\boxed{5}.` against `5`), where verl pays 1.0.
"""

from __future__ import annotations

import time

import pytest

from trainer.rewards import math_dapo
from trainer.rewards.dispatch import RewardScorer

RIGHT, WRONG = math_dapo.CORRECT, math_dapo.WRONG


@pytest.mark.parametrize(
    "response, truth",
    [
        ("So the total is \\boxed{5}.", "5"),
        ("\\boxed{2\\sqrt{2}}", "2\\sqrt{2}"),
        ("x = \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces: up to the closing one
        ("\\boxed{{a}{b}}", "{a}{b}"),
        ("\\boxed{4} first, then \\boxed{5}", "5"),  # the last box
        ("\\boxed{5}" + "." * 91, "5"),  # the box starts within the last 100 characters
        ("Answer: \\boxed{5}", "5"),  # an `Answer:` line, read by its own rule
        ("Answer: [INVALID]\n\\boxed{5}", "5"),  # an answer that normalizes to no answer
        ("Answer: 5\n" + "x" * 300 + "\\boxed{5}", "5"),  # the line is past the last 300
    ],
)
def test_a_box_without_an_answer_line_is_scored(response, truth):
    assert math_dapo.compute_score(response, truth) == RIGHT


@pytest.mark.parametrize(
    "response, truth",
    [
        ("\\boxed{5}" + "." * 92, "5"),  # the box starts before the last 100 characters
        ("\\boxed{5} and \\boxed{6", "5"),  # the last box never closes: an earlier one is not read
        ("\\boxed 5", "5"),  # no `\boxed{`: no box (the MATH rule reads this form, DAPO does not)
        ("\\fbox{5}", "5"),
        ("\\boxed{}", "5"),
        ("\\boxed{1,000}", "1000"),  # as given, not normalized (the `Answer:` line's rule would)
        ("\\boxed{5}", " 5"),
        ("\\boxed{$5$}", "5"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{\\text{5}}", "5"),
        ("Answer: 6\n\\boxed{5}", "5"),  # both: the `Answer:` line decides
        ("", "5"),
    ],
)
def test_no_box_or_another_box_is_wrong(response, truth):
    assert math_dapo.compute_score(response, truth) == WRONG


def test_the_answer_line_decides_where_both_are_given():
    assert math_dapo.compute_score("\\boxed{6}\nAnswer: 5", "5") == RIGHT
    assert math_dapo.compute_score("Answer: 1,000\n\\boxed{7}", "1000") == RIGHT


def test_with_neither_no_answer_is_compared_as_an_answer():
    assert math_dapo.compute_score("the total is 5", "5") == WRONG
    assert math_dapo.compute_score("", "") == WRONG
    # a ground truth that normalizes to the no-answer text is matched by no answer, as in verl
    assert math_dapo.compute_score("\\boxed 5", math_dapo.NO_ANSWER) == RIGHT
    assert math_dapo.compute_score("\\boxed{5}", math_dapo.NO_ANSWER) == WRONG


def test_the_box_reads_its_braces_balanced():
    assert math_dapo.boxed_answer("\\boxed{5}}}}") == "5"
    assert math_dapo.boxed_answer("\\boxed{\\frac{1}{2}} = x") == "\\frac{1}{2}"
    assert math_dapo.boxed_answer("\\boxed{\\frac{1}{2}") is None
    assert math_dapo.boxed_answer("\\boxed{5}" + "." * 91) == "5"
    assert math_dapo.boxed_answer("\\boxed{5}" + "." * 92) is None  # `\` is 101st from the end


def test_a_boxed_right_answer_counts_as_accurate():
    scores = RewardScorer()(["math_dapo", "aime2024"], ["\\boxed{3}", "\\boxed{4}"], ["3", "5"])
    assert scores.rewards == [RIGHT, WRONG]
    assert scores.accuracy == [1.0, 0.0]


MEGABYTE = 1 << 20
BOUND_S = 10.0  # only the last 100 characters are scanned for the box: milliseconds


@pytest.mark.parametrize(
    "response, score",
    [
        ("\\boxed{" * (MEGABYTE // 7), WRONG),  # never closed
        ("{" * MEGABYTE + "\\boxed{5}", RIGHT),
        ("\\boxed{" + "{" * MEGABYTE + "}" * MEGABYTE + "}", WRONG),  # starts a megabyte back
    ],
    ids=["open boxes", "open braces", "long box"],
)
def test_a_megabyte_response_is_scored_by_its_box_in_linear_time(response, score):
    start = time.perf_counter()
    assert math_dapo.compute_score(response, "5") == score
    assert time.perf_counter() - start < BOUND_S
