"""`mfsdp data math` takes a MATH solution's ground truth exactly as verl's preprocessing
does (examples/data_preprocess/math_dataset.py `extract_solution`:
`remove_boxed(last_boxed_only_string(solution))`, verl/utils/reward_score/math_reward.py).
It took the LAST box whatever its form, and a later `\\fbox` over a `\\boxed`, where verl
prefers the `\\boxed ` (space) form anywhere in the solution and reads `\\fbox` only when no
`\\boxed` is there: such rows got another ground truth than verl's. A solution verl's
preprocessing fails on is refused naming the row, as is an empty answer.
"""

from __future__ import annotations

import random

import pytest

from trainer.data.files import DataFileError
from trainer.data.math_datasets import math_rows


# Transcribed from verl (github.com/volcengine/verl at b178a3cd56f58b2d502255daba591e92833930a7),
# verl/utils/reward_score/math_reward.py: `remove_boxed` and `last_boxed_only_string`, unchanged
# but for names and layout; examples/data_preprocess/math_dataset.py applies them in that order.
def verl_remove_boxed(s):
    if "\\boxed " in s:
        left = "\\boxed "
        assert s[: len(left)] == left
        return s[len(left) :]
    left = "\\boxed{"
    assert s[: len(left)] == left
    assert s[-1] == "}"
    return s[len(left) : -1]


def verl_last_boxed_only_string(string):
    idx = string.rfind("\\boxed")
    if "\\boxed " in string:
        return "\\boxed " + string.split("\\boxed ")[-1].split("$")[0]
    if idx < 0:
        idx = string.rfind("\\fbox")
        if idx < 0:
            return None
    i = idx
    right_brace_idx = None
    num_left_braces_open = 0
    while i < len(string):
        if string[i] == "{":
            num_left_braces_open += 1
        if string[i] == "}":
            num_left_braces_open -= 1
            if num_left_braces_open == 0:
                right_brace_idx = i
                break
        i += 1
    return None if right_brace_idx is None else string[idx : right_brace_idx + 1]


def verl_extract_solution(solution):
    """What verl's preprocessing writes as the ground truth; None where it raises."""
    try:
        return verl_remove_boxed(verl_last_boxed_only_string(solution))
    except (AssertionError, TypeError):  # remove_boxed's asserts, or None (no box at all)
        return None


PIECES = [
    "\\boxed{",
    "\\boxed ",
    "\\boxed",
    "\\fbox{",
    "{",
    "}",
    "$",
    "7",
    "x^2",
    " ",
    "\n",
    "\\frac{1}{2}",
]


def generated_solutions(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(PIECES, k=rng.randint(1, 9))) for _ in range(count)]


def mfsdp_truth(solution: str) -> str | None:
    """The ground truth `mfsdp data math` writes for a row of `solution`; None: refused."""
    try:
        (rl_row,) = math_rows([{"problem": "p", "solution": solution}], "train")[1]
    except DataFileError:
        return None
    return rl_row["reward_model"]["ground_truth"]


def test_a_few_hundred_solutions_give_verls_ground_truth():
    solutions = generated_solutions(600)
    expected = [verl_extract_solution(text) for text in solutions]
    # an empty answer is refused too: no response could match it
    expected = [None if truth is None or not truth.strip() else truth for truth in expected]
    assert sum(truth is not None for truth in expected) > 100  # both kinds well represented
    assert sum(truth is None for truth in expected) > 100
    differing = [
        (text, truth, mfsdp_truth(text))
        for text, truth in zip(solutions, expected, strict=True)
        if mfsdp_truth(text) != truth
    ]
    assert differing == []


@pytest.mark.parametrize(
    "solution",
    [
        "so \\boxed 5$ and then \\boxed{6}",  # the spaced form wins though the last is braced
        "\\boxed{1} then \\fbox{2}",  # \fbox only where no \boxed is
        "\\boxed 3\n",  # the answer as written, up to a `$`
    ],
)
def test_the_cases_that_differed(solution):
    assert mfsdp_truth(solution) == verl_extract_solution(solution)


def test_a_refusal_names_the_row_and_why():
    with pytest.raises(DataFileError, match=r"^row 1: solution's last \\boxed is not followed"):
        math_rows([{"problem": "p", "solution": "\\boxed\\frac{1}{2}"}], "train")
