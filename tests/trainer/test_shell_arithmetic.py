"""`$(( ... ))` as verl's launch scripts write it is worked out as bash would; anything else
stays text (None) and nothing is run."""

import pytest

from trainer.shell_arithmetic import ARITHMETIC, evaluate


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("1024 * 8", 8192),
        ("(prompt + response) * 2", 6144),
        ("(prompt + response) * 10 / 10", 3072),
        ("-7 / 2", -3),  # toward zero, as bash
        ("-7 % 2", -1),
        ("$prompt", None),  # `$NAME` is substituted before; left here it is not arithmetic
        ("unknown + 1", None),
        ("2 ** 10", None),
        ("1 / 0", None),
        ("9223372036854775807 * 2", None),
        ("__import__('os')", None),
        ("1" * 300, None),
    ],
)
def test_evaluate(expression, expected):
    assert evaluate(expression, {"prompt": "1024", "response": "2048"}) == expected


def test_a_name_holding_text_is_not_a_number():
    assert evaluate("x + 1", {"x": "1; touch /tmp/x"}) is None


def test_the_pattern_takes_one_level_of_inner_parentheses():
    text = "a=$(((p + r) * 2)) b=$(date)"
    assert [m.group(1) for m in ARITHMETIC.finditer(text)] == ["(p + r) * 2"]
