"""The MATH reward reads a response's box exactly as verl's MATH reward does
(`remove_boxed(last_boxed_only_string(response))`, verl/utils/reward_score/math.py, any
failure scoring 0), with the one reader `mfsdp data math` takes the ground truth by. It took
the last box whatever its form, an `\\fbox` too, and the first braces after a last `\\boxed`
not followed by `{`, so such a response scored what verl does not score. An ordinary
`\\boxed{...}` answer is read as before."""

from __future__ import annotations

import pytest

from tests.trainer.data.test_math_ground_truth_as_verl import (
    generated_solutions,
    verl_extract_solution,
)
from trainer.rewards import math


def test_a_few_hundred_responses_give_verls_answer():
    responses = generated_solutions(600, seed=1)
    expected = [verl_extract_solution(text) for text in responses]
    assert sum(answer is not None for answer in expected) > 100  # both kinds well represented
    assert sum(answer is None for answer in expected) > 100
    differing = [
        (text, answer, math.last_boxed(text))
        for text, answer in zip(responses, expected, strict=True)
        if math.last_boxed(text) != answer
    ]
    assert differing == []


@pytest.mark.parametrize(
    ("response", "truth"),
    [
        ("so \\boxed 5$ and then \\boxed{6}", "6"),  # the spaced form wins though last
        ("\\boxed{1} then \\fbox{2}", "2"),  # \fbox only where no \boxed is
        ("\\fbox{2}", "2"),  # and verl's remove_boxed reads no \fbox
        ("\\boxed\\frac{1}{2}", "1"),  # a last \boxed without `{`: no answer
    ],
)
def test_a_response_verl_scores_0_scores_0(response, truth):
    verl_answer = verl_extract_solution(response)
    assert verl_answer != truth
    assert math.compute_score(response, truth) == 0.0


@pytest.mark.parametrize(
    "response",
    ["The answer is $\\boxed{\\frac{3}{4}}$.", "so \\boxed{x^{2}+1}", "\\boxed{7} \\boxed{42}"],
)
def test_an_ordinary_boxed_answer_scores_as_before(response):
    answer = verl_extract_solution(response)
    assert answer is not None
    assert math.compute_score(response, answer) == 1.0
    assert math.compute_score(response, answer + "1") == 0.0
