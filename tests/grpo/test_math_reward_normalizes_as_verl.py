"""The MATH sources (lighteval/MATH, DigitalLearningGmbH/MATH-lighteval, HuggingFaceH4/MATH-500)
are scored exactly as verl's `default_compute_score` scores them: its `math_reward` rule,
`strip_string` on both sides and string equality, the strings compared unchanged where the
normalization fails, the ground truth as given.

Were: a normalization of mfsdp's own. Right answers with units (`5` for `5\\text{ cm}^2`)
scored 0 where verl pays 1; and `72.0` for `72`, `50%` for `50`, `$5$`, `\\text{A}` for `A`,
`\\mbox{}`, `xy = 3` for `3` and a boxed ground truth scored 1 where verl pays 0; an installed
math-verify added matches verl's default never makes.

`verl_strip_string` below is the rule as verl writes it down (verl/utils/reward_score/
math_reward.py at b178a3cd), transcribed step for step and independently of
trainer/rewards/math.py; its expectations come from it.
"""

from __future__ import annotations

import random
import re
import sys

import pytest

from tests.trainer.data.test_math_ground_truth_as_verl import verl_extract_solution
from trainer.rewards.dispatch import MATH_SOURCES, RewardScorer, default_compute_score


class NormalizationFails(Exception):
    """Where verl's `strip_string` raises: `is_equiv` then compares the strings as given."""


# The plain replacements, in verl's order: before its unit removal, then after it
_BEFORE_UNITS = [
    ("\n", ""),  # linebreaks
    ("\\!", ""),  # inverse spaces
    ("\\\\", "\\"),
    ("tfrac", "frac"),
    ("dfrac", "frac"),
    ("\\left", ""),
    ("\\right", ""),
    ("^{\\circ}", ""),
    ("^\\circ", ""),
    ("\\$", ""),
]
_AFTER_UNITS = [("\\\\%", ""), ("\\%", ""), (" .", " 0."), ("{.", "{0.")]
_PLAIN_INTEGER = r"(?:0|-?[1-9][0-9]*)"


def _replace(text: str, pairs: list[tuple[str, str]]) -> str:
    for old, new in pairs:
        text = text.replace(old, new)
    return text


def _remove_right_units(text: str) -> str:
    """All before a `\\text{ `; more than one fails."""
    if text.count("\\text{ ") > 1:
        raise NormalizationFails("two units")
    return text.partition("\\text{ ")[0]


def _drop_short_equation_side(text: str) -> str:
    """`k = 3` -> ` 3`: one `=`, the part before it (spaces counted) at most 2 long."""
    if text.count("=") == 1 and len(text.partition("=")[0]) <= 2:
        return text.partition("=")[2]
    return text


def _fix_sqrt(text: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}`, whatever the one character is; a `\\sqrt` with nothing
    before the next `\\sqrt` or the end fails."""
    if re.search(r"\\sqrt(?=\\sqrt|$)", text, re.DOTALL):
        raise NormalizationFails("empty sqrt")
    return re.sub(r"\\sqrt([^{])", r"\\sqrt{\1}", text, flags=re.DOTALL)


def _fix_fracs(text: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{2}` -> `\\frac{1}{2}`. The first `\\frac` with
    nothing after it (before the next or the end) fails, the first with one character that is
    not `{` leaves the text as it is, whichever comes first."""
    first_short = re.search(r"\\frac(?:[^{])?(?=\\frac|$)", text, re.DOTALL)
    if first_short and first_short.group() == "\\frac":
        raise NormalizationFails("empty frac")
    if first_short:
        return text

    def braced(found: re.Match) -> str:
        numerator, after = found.group(1), found.group(2)
        return "\\frac{" + numerator + "}" + (after if after == "{" else "{" + after + "}")

    return re.sub(r"\\frac([^{])(.)", braced, text, flags=re.DOTALL)


def _fix_a_slash_b(text: str) -> str:
    """`3/4` -> `\\frac{3}{4}`: two integers as Python prints them, around the one `/`."""
    found = re.fullmatch(rf"({_PLAIN_INTEGER})/({_PLAIN_INTEGER})", text)
    if not found:
        return text
    numerator, denominator = found.groups()
    return "\\frac{" + numerator + "}{" + denominator + "}"


def verl_strip_string(text: str) -> str:
    text = _replace(text, _BEFORE_UNITS)
    text = _remove_right_units(text)
    text = _replace(text, _AFTER_UNITS)
    if text == "":
        return text
    if text[0] == ".":
        text = "0" + text
    text = _drop_short_equation_side(text)
    text = _fix_sqrt(text)
    text = text.replace(" ", "")
    text = _fix_fracs(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _fix_a_slash_b(text)


def verl_math_score(response: str, ground_truth: str) -> float:
    """verl's `math_reward.compute_score`: the box as verl reads it, `is_equiv` with the
    ground truth as given."""
    answer = verl_extract_solution(response)
    if answer is None:
        return 0.0
    try:
        equal = verl_strip_string(answer) == verl_strip_string(ground_truth)
    except NormalizationFails:
        equal = answer == ground_truth
    return 1.0 if equal else 0.0


def _response(answer: str) -> str:
    return f"... so the answer is $\\boxed{{{answer}}}$."


# (boxed answer, ground truth, verl's score) where mfsdp scored otherwise
RIGHT_WITH_UNITS = [
    ("5", "5\\text{ cm}^2"),
    ("25", "25\\text{ m/s}"),
    ("12", "12\\text{ sq. ft}"),
    ("4", "4\\text{ ft}^3"),
    ("90", "90\\text{ km/h}"),
    ("3", "3\\text{ cm}."),
]
NOT_EQUAL_FOR_VERL = [
    ("72", "72.0"),
    ("72.0", "72"),
    ("72.00", "72"),
    ("50%", "50"),
    ("$5$", "5"),
    ("(A)", "\\text{(A)}"),
    ("\\text{(A)}", "(A)"),
    ("A", "\\text{A}"),
    ("\\mbox{Monday}", "\\text{Monday}"),
    ("Monday", "\\text{Monday}"),
    ("5\\text{cm}", "5"),
    ("\\mathrm{72}", "72"),
    ("xy = 3", "3"),
    ("72", "\\boxed{72}"),
    ("2\\sqrt2", "\\sqrt8"),  # symbolic equivalence: math-verify's, not verl's
]
EQUAL_FOR_VERL = [
    ("50\\%", "50"),
    ("5 \\text{ cm}", "5"),
    ("\\text{Monday}", "\\text{Monday}"),
    ("\\$18.90", "18.90"),
    ("\\dfrac12", "\\frac{1}{2}"),
    ("0.5", "\\frac12"),
    ("3/4", "\\frac34"),
    ("k = 7", "7"),
    ("90^\\circ", "90"),
    ("\\sqrt", "\\sqrt"),  # the normalization fails: equal as written
    ("\\frac", "\\frac"),
]


@pytest.mark.parametrize(("answer", "truth"), RIGHT_WITH_UNITS + EQUAL_FOR_VERL)
def test_an_answer_verl_counts_right_scores_1(answer, truth):
    assert verl_math_score(_response(answer), truth) == 1.0
    for source in MATH_SOURCES:
        assert default_compute_score(source, _response(answer), truth) == 1.0


@pytest.mark.parametrize(("answer", "truth"), NOT_EQUAL_FOR_VERL)
def test_an_answer_verl_counts_wrong_scores_0(answer, truth):
    assert verl_math_score(_response(answer), truth) == 0.0
    for source in MATH_SOURCES:
        assert default_compute_score(source, _response(answer), truth) == 0.0


def test_failing_normalization_compares_the_strings_as_given():
    assert verl_math_score(_response("\\sqrt"), "\\sqrt{}") == 0.0
    assert default_compute_score("lighteval/MATH", _response("\\sqrt"), "\\sqrt{}") == 0.0
    twice = "1\\text{ a}\\text{ b}"  # two units: verl's normalization fails
    assert verl_math_score(_response(twice), "1") == 0.0
    assert default_compute_score("lighteval/MATH", _response(twice), "1") == 0.0
    assert default_compute_score("lighteval/MATH", _response(twice), twice) == 1.0


# The pieces verl's normalization acts on, for answers and ground truths made of them
PIECES = [
    *"0123579.-/{}= ,()xa%$",
    "\\frac", "\\dfrac", "\\tfrac", "\\sqrt", "\\text{ ", "\\text{", "cm", "\\%", "\\$",
    "^\\circ", "^{\\circ}", "\\left(", "\\right)", "\\!", "\\\\", "\\pi", "0.5", " .", "{.",
    "k =", "\\mbox{", "\n",
]  # fmt: skip


def _random_answer(rng: random.Random) -> str:
    return "".join(rng.choices(PIECES, k=rng.randint(0, 7)))


def test_a_few_thousand_answers_score_as_verl():
    """Random pairs rarely match, so each answer is also scored against its own normalized
    form and a copy with a piece changed: both scores come up often."""
    rng = random.Random(12)
    cases = []
    for _ in range(2500):
        answer = _random_answer(rng)
        try:
            normalized = verl_strip_string(answer)
        except NormalizationFails:
            normalized = answer
        for truth in (normalized, answer + rng.choice(PIECES), _random_answer(rng)):
            cases.append((_response(answer), truth))
    expected = [verl_math_score(response, truth) for response, truth in cases]
    assert 0.2 < sum(expected) / len(expected) < 0.8  # both scores well represented
    scores = RewardScorer()(
        ["lighteval/MATH"] * len(cases), [r for r, _ in cases], [t for _, t in cases]
    ).rewards
    differing = [
        (case, want, got)
        for case, want, got in zip(cases, expected, scores, strict=True)
        if want != got
    ]
    assert differing == []


def test_an_installed_math_verify_changes_no_reward(tmp_path, monkeypatch):
    """verl's default leaves math-verify out: one that is installed (here one that finds every
    pair equal) is not asked."""
    (tmp_path / "math_verify.py").write_text(
        "def parse(text):\n    return text\n\ndef verify(gold, answer):\n    return True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "math_verify", raising=False)
    for answer, truth in NOT_EQUAL_FOR_VERL:
        assert default_compute_score("lighteval/MATH", _response(answer), truth) == 0.0
