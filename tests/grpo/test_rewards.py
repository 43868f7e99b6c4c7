"""Rule rewards (gsm8k, math), dispatch by data_source, and custom reward files."""

import pytest

from trainer.rewards import gsm8k, math
from trainer.rewards.custom import RewardError, load_reward_function
from trainer.rewards.dispatch import RewardScorer, default_compute_score


@pytest.mark.parametrize(
    "text, strict, flexible",
    [
        ("so 3 + 4 = 7\n#### 7", "7", "7"),
        ("#### 1,234 apples", "1234", "1234"),
        ("total: #### $12.", "12", "12"),
        ("#### -5", "-5", "-5"),
        ("first #### 3 then #### 4", "4", "4"),
        ("the answer is 42", None, "42"),
        ("no numbers here", None, None),
    ],
)
def test_gsm8k_extraction(text, strict, flexible):
    assert gsm8k.extract_answer(text, "strict") == strict
    assert gsm8k.extract_answer(text, "flexible") == flexible


def test_gsm8k_only_reads_the_last_300_chars():
    early = "#### 7\n" + "x" * 300
    assert gsm8k.extract_answer(early) is None
    assert gsm8k.compute_score(early, "7") == 0.0
    assert gsm8k.compute_score("x" * 400 + "#### 7", "7") == 1.0


def test_gsm8k_score():
    assert gsm8k.compute_score("#### 18", "18") == 1.0
    assert gsm8k.compute_score("#### 18.0", "18") == 1.0
    assert gsm8k.compute_score("#### 1,000", "1000") == 1.0
    assert gsm8k.compute_score("#### 17", "18") == 0.0
    assert gsm8k.compute_score("#### 17", "18", format_score=0.1) == 0.1
    assert gsm8k.compute_score("18", "18") == 0.0  # strict needs ####
    assert gsm8k.compute_score("18", "18", method="flexible") == 1.0


def test_math_last_boxed():
    assert math.last_boxed(r"a \boxed{1} then \boxed{\frac{1}{2}} end") == r"\frac{1}{2}"
    assert math.last_boxed(r"\boxed{x^{2}+1}") == "x^{2}+1"
    assert math.last_boxed(r"\fbox{5}") == "5"
    assert math.last_boxed(r"\boxed 7$") == "7"
    assert math.last_boxed(r"\boxed{unclosed") is None
    assert math.last_boxed("nothing") is None


@pytest.mark.parametrize(
    "answer, truth",
    [
        (r"\dfrac12", r"\frac{1}{2}"),
        ("0.5", r"\frac{1}{2}"),
        ("1/2", r"\frac{1}{2}"),
        (r"\left(3, 4\right)", "(3,4)"),
        (r"90^\circ", "90"),
        ("x = 3", "3"),
        (r"\sqrt3", r"\sqrt{3}"),
        (r"50\%", "50"),
        (r"10 \text{ inches}", "10"),
        ("5.00", "5"),
        (r"\$7", "7"),
        (".5", "0.5"),
    ],
)
def test_math_normalization_equivalences(answer, truth):
    assert math.normalize(answer) == math.normalize(truth)
    assert math.compute_score(rf"so \boxed{{{answer}}}", truth) == 1.0


def test_math_wrong_and_missing():
    assert math.compute_score(r"\boxed{3}", "4") == 0.0
    assert math.compute_score(r"\boxed{\frac{1}{3}}", r"\frac{1}{2}") == 0.0
    assert math.compute_score("3", "3") == 0.0  # no box
    assert math.compute_score(r"\boxed{3}", r"\boxed{3}") == 1.0  # boxed ground truth


def test_dispatch_by_data_source():
    assert default_compute_score("openai/gsm8k", "#### 5", "5") == 1.0
    assert default_compute_score("lighteval/MATH", r"\boxed{5}", "5") == 1.0
    assert default_compute_score("lighteval/MATH", "#### 5", "5") == 0.0  # math wants a box
    with pytest.raises(RewardError, match=r"data_source 'mystery'.*reward\.path"):
        default_compute_score("mystery", "5", "5")


def test_scorer_mixed_batch():
    scores = RewardScorer()(
        ["openai/gsm8k", "lighteval/MATH", "openai/gsm8k"],
        ["#### 3", r"\boxed{2}", "#### 9"],
        ["3", "2", "4"],
    )
    assert scores.rewards == [1.0, 1.0, 0.0]
    assert scores.accuracy == [1.0, 1.0, 0.0]


def test_custom_reward_file(tmp_path):
    file = tmp_path / "my_reward.py"
    file.write_text(
        "def length_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': len(solution_str) / 10, 'acc': float(solution_str == ground_truth)}\n"
        "NOT_A_FUNCTION = 3\n"
    )
    scorer = RewardScorer(str(file), "length_score")
    scores = scorer(["anything", "x"], ["abcde", "ok"], ["abcde", "no"], [{"index": 0}, None])
    assert scores.rewards == [0.5, 0.2]
    assert scores.accuracy == [1.0, 0.0]
    with pytest.raises(RewardError, match="defines no such function"):
        load_reward_function(file, "missing")
    with pytest.raises(RewardError, match="not callable"):
        load_reward_function(file, "NOT_A_FUNCTION")
    with pytest.raises(RewardError, match="no such file"):
        load_reward_function(tmp_path / "absent.py")
    broken = tmp_path / "broken.py"
    broken.write_text("import nonexistent_module_xyz\n")
    with pytest.raises(RewardError, match="importing it failed: ModuleNotFoundError"):
        load_reward_function(broken)
