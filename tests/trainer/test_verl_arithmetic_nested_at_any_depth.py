"""`$(( ... ))` nested inside another (`$(( $((a*2)) + 1 ))`, `$(( (a+b) * $((c)) ))`) and
bash's older `$[ ... ]`, in a verl override: worked out innermost first, at any depth, as
bash expands them. A nested sum was listed as known only when the script runs (exit 1), and
`$[a+b]` was refused as a value verl's Hydra cannot read (exit 2), where bash passes the
number. Each value is compared with bash's."""

from __future__ import annotations

import subprocess

import pytest

from trainer.shell_arithmetic import expand, spans
from trainer.verl_import import convert_verl
from trainer.verl_script_lines import _shell_words

SET = "a=2; b=3; c=4"
SUMS = {
    "nested-in-a-sum": "$(( $((a*2)) + 1 ))",
    "nested-in-a-product": "$(( (a+b) * $((c)) ))",
    "bracket-form": "$[a+b]",
    "bracket-form-spaced": "$[ a * 8 ]",
    "bracket-form-double-quoted": '"$[ a * 8 ]"',
    "brackets-in-arithmetic": "$[ $[a] * $(( b )) ]",
    "six-deep": "$(( $(( $(( $(( $(( $((c)) + 1 )) )) )) * 2 )) - a ))",
    "a-sum-in-a-default": "${UNSET:-$(( $((a)) * 3 ))}",
}


def _bash(word: str) -> str:
    done = subprocess.run(
        ["bash", "-c", f"{SET}; printf %s {word}"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("word", SUMS.values(), ids=SUMS.keys())
def test_from_verl_works_out_nested_sums_as_bash(tmp_path, word):
    script = tmp_path / "run.sh"
    script.write_text(
        f"{SET}\npython3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        f" trainer.total_epochs={word}\n"
    )
    conversion = convert_verl(script)
    assert conversion.dropped == [] and conversion.incomplete == []
    assert str(conversion.tree["trainer"]["epochs"]) == _bash(word)


@pytest.mark.parametrize(
    "lines",
    [
        "{launch} trainer.total_epochs=$[ $((M)) + 1 ]",
        "X=$[ $((M)) + 1 ]\n{launch} trainer.total_epochs=$X",  # unquoted: not split at blanks
    ],
    ids=["written-out", "from-a-variable"],
)
def test_a_nested_sum_not_known_here_is_listed_whole(tmp_path, lines):
    script = tmp_path / "run.sh"
    launch = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
    script.write_text(lines.format(launch=launch) + "\n")
    conversion = convert_verl(script)
    assert [item.split(": ", 1)[0] for item in conversion.dropped] == [
        "trainer.epochs=$[ $((M)) + 1 ]"
    ]


def test_a_shift_in_brackets_opens_no_here_doc(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "N=$[ 1 << 3 ] # comment\npython3 -m verl.trainer.main_ppo"
        " algorithm.adv_estimator=grpo trainer.total_epochs=$[ 2 * 4 ]\n"
    )
    assert convert_verl(script).tree["trainer"]["epochs"] == 8


@pytest.mark.parametrize(
    "text, expected",
    [
        ("$((cd x) && ls)", "$((cd x) && ls)"),  # a command substitution holding a subshell
        ("$(echo $((1+2)))", "$(echo $((1+2)))"),  # a command is never run, nor worked out
        ("$((1+2", "$((1+2"),  # never closed
        ("$[1]]", "1]"),  # the `]` after it is text, as bash reads it
        ("x$((2*3))y$[4]z", "x6y4z"),
    ],
)
def test_what_is_arithmetic_and_what_is_not(text, expected):
    assert expand(text, {}) == expected


def test_a_deep_nesting_is_read_in_one_pass():
    depth = 5000  # far past Python's recursion limit
    text = "$((" * depth + "1" + "))" * depth
    assert expand(text, {}) == "1"
    assert [span.end for span in spans(text)] == [len(text)]


def test_each_form_is_one_shell_word():
    line = 'x a=$(( $(( $(( $(( 1 )) )) )) )) b=$[ N + 1 ] c="$[ A[1] * 2 ]"'
    assert _shell_words(line) == [
        "x",
        "a=$(( $(( $(( $(( 1 )) )) )) ))",
        "b=$[ N + 1 ]",
        "c=$[ A[1] * 2 ]",
    ]


@pytest.mark.parametrize("setter", [": $[ N = 8 ]", ": $(( $((N = 8)) ))", "X=$[ $[N += 4] ]"])
def test_a_nested_or_bracket_sum_that_assigns_is_named(tmp_path, setter):
    script = tmp_path / "run.sh"
    script.write_text(
        f"N=4\n{setter}\npython3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        " trainer.total_epochs=$N\n"
    )
    conversion = convert_verl(script)  # bash passes 8; this is not worked out here
    assert [item.split(": ", 1)[0] for item in conversion.dropped] == ["trainer.epochs=$N"]
