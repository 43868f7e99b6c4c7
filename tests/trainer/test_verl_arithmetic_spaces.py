"""`$(( ... ))` as bash reads it: spaces anywhere inside (`$(( 3 * 5 ))`) and names of the
script's variables without `$` (`$(( N*2 ))`). Both were reported as "known only when the
script runs" (exit 1), though only `$((3*5))` without spaces was worked out; an unknown
name, a command substitution and an over-long sum still stay text."""

from pathlib import Path

import pytest

from trainer.shell_arithmetic import MAX_EXPRESSION_CHARS, evaluate, spans
from trainer.verl_import import Conversion, convert_verl
from trainer.verl_script_lines import _shell_words

COMMAND = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo "


def converted(tmp_path: Path, text: str) -> Conversion:
    script = tmp_path / "run.sh"
    script.write_text(text)
    return convert_verl(script)


@pytest.mark.parametrize(
    "expression, expected",
    [
        (" 3 * 5 ", 15),
        (" N*2 ", 8),
        ("N * 2", 8),
        ("\tN\t*\t2\t", 8),
        (" ( N + 1 ) * 2 ", 10),
        (" ((N + (1))) * 2 ", 10),
        (" - N ", -4),
        ("  M * 2 ", None),  # a name the script does not set: known only when it runs
        (" 3\u2000*5 ", None),  # not a blank bash skips
        (" 3 5 ", None),
    ],
)
def test_spaces_and_bare_names_are_worked_out(expression, expected):
    assert evaluate(expression, {"N": "4"}) == expected


def test_the_size_limit_counts_the_spaces_too():
    spaced = " " + "1 + " * (MAX_EXPRESSION_CHARS // 4) + "1 "
    assert len(spaced) > MAX_EXPRESSION_CHARS and evaluate(spaced, {}) is None


def test_a_spaced_sum_with_inner_parentheses_is_one_word():
    line = "x a=$(( ((N + (1))) * 2 )) b=$(( N * 2 )) c=$(date +%s)"
    assert _shell_words(line) == [
        "x",
        "a=$(( ((N + (1))) * 2 ))",
        "b=$(( N * 2 ))",
        "c=$(date +%s)",
    ]
    assert [span.expression for span in spans("$(( ((((1)))) ))")] == [" ((((1)))) "]  # any depth


def test_from_verl_works_out_spaced_arithmetic(tmp_path):
    conversion = converted(tmp_path, COMMAND + "trainer.total_epochs=$(( 3 * 5 ))\n")
    assert conversion.dropped == [] and conversion.tree["trainer"]["epochs"] == 15


def test_from_verl_works_out_bare_names_of_the_scripts_variables(tmp_path):
    conversion = converted(
        tmp_path,
        "N=4\nA=$(( N * 2 ))\n"
        + COMMAND
        + "trainer.total_epochs=$(( N*2 )) \\\n"
        + "    data.max_prompt_length=$(( (A + $N) * 2 )) \\\n"
        + '    "actor_rollout_ref.rollout.n=$((\tA / 2 ))"\n',
    )
    assert conversion.dropped == [], conversion.dropped
    assert conversion.tree["trainer"]["epochs"] == 8
    assert conversion.tree["data"]["max_prompt_length"] == 24
    assert conversion.tree["rollout"]["n"] == 4


def test_an_unknown_bare_name_is_still_known_only_when_the_script_runs(tmp_path):
    conversion = converted(tmp_path, COMMAND + "trainer.total_epochs=$(( M * 2 ))\n")
    assert conversion.dropped[0].startswith(
        "trainer.epochs=$(( M * 2 )): known only when the script runs"
    ), conversion.dropped


def test_a_command_inside_spaced_arithmetic_is_not_run(tmp_path):
    marker = tmp_path / "ran"
    conversion = converted(
        tmp_path,
        f"{COMMAND}trainer.total_epochs=$(( $(touch {marker}) * 2 ))\n",
    )
    assert not marker.exists()
    assert [item.split(":", 1)[0] for item in conversion.dropped] == [
        f"trainer.epochs=$(( $(touch {marker}) * 2 ))"
    ]
