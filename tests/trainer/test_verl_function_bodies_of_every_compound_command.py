"""`mfsdp config from-verl` on a script whose function's body is a compound command other
than `{ ...; }`: bash takes any as a body (`f() ( ... )`, `f() if ...; fi`, `f() for ...;
done`, `f() [[ ... ]]`, `f() (( ... ))`, also as `function f ( ... )` or `f ( ) ...`), and
runs it where the function is called. Only `{ ...; }` bodies were read at the call: a verl
command in a subshell or loop body got the variables as they stood at the definition (and
not its arguments), at exit 0. Each case is compared with bash running the script, and with
the same body written inside `{ ...; }`, which bash runs alike."""

from __future__ import annotations

import pytest

from tests.support.verl_conversions import LAUNCH, as_given, bash_model_value, convert_launch
from trainer import shell_lines
from trainer.verl_import import convert_verl
from trainer.verl_script_lines import _shell_words

# MODEL is set again between the definition and the call; the call passes /m/c as $1
BODIES = {
    "subshell": f"( {LAUNCH} )",
    "subshell-over-lines": f"(\n  {LAUNCH}\n)",
    "subshell-glued": f"({LAUNCH})",
    "subshell-setting-its-argument": f'(\n  MODEL="$1"\n  {LAUNCH}\n)',
    "subshell-with-a-redirection": f"( {LAUNCH} ) >/dev/null",
    "if": f'if [ "$1" = /m/c ]; then\n  {LAUNCH}\nfi',
    "for": f"for seed in 1; do {LAUNCH}; done",
    "while": f"while true; do\n  {LAUNCH}\n  break\ndone",
    "until": f"until false; do {LAUNCH}; break; done",
    "case-on-its-argument": f'case "$1" in\n  /m/c) MODEL=$1; {LAUNCH} ;;\nesac',
}
HEADS = {
    "name()": "train() ",
    "name-()-on-its-own-line": "train()\n",
    "name-(-)": "train ( ) ",
    "function-name()": "function train() ",
    "function-name-()": "function train () ",
    "function-name": "function train ",
}
CALLED = "\nMODEL=/m/b\ntrain /m/c\n"


def _script(head: str, body: str) -> str:
    return f"MODEL=/m/a\n{head}{body}{CALLED}"


def _check_with_bash(tmp_path, lines: str) -> None:
    conversion = convert_launch(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == bash_model_value(tmp_path, lines)
    assert conversion.incomplete == [] and conversion.dropped == []


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_a_verl_command_in_any_body_reads_the_variables_where_it_is_called(tmp_path, body):
    _check_with_bash(tmp_path, _script("train() ", body))


@pytest.mark.parametrize("body", ["subshell", "if"])
@pytest.mark.parametrize("head", HEADS.values(), ids=HEADS.keys())
def test_every_way_of_naming_a_function_defines_it(tmp_path, head, body):
    _check_with_bash(tmp_path, _script(head, BODIES[body]))


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_any_body_converts_as_the_same_body_in_braces(tmp_path, body):
    bare = convert_launch(tmp_path, _script("train() ", body))
    braced = convert_launch(tmp_path, _script("train() ", f"{{\n{body}\n}}"))
    assert bare.tree == braced.tree
    assert (bare.incomplete, bare.dropped) == (braced.incomplete, braced.dropped)


# bodies that set a variable, called before the verl command, read at the call as the same
# compound command at the top level is: a `case` on the call's argument runs its arm; what a
# subshell or loop body sets is named to check, the value from before it used
SETTERS = {
    "case": ("case $1 in go) MODEL=/m/c ;; esac", "/m/c", False),
    "subshell": ("( MODEL=/m/c )", "/m/a", True),
    "for": ("for m in /m/c; do MODEL=$m; done", "/m/a", True),
}


@pytest.mark.parametrize("body, value, flagged", SETTERS.values(), ids=SETTERS.keys())
def test_what_a_body_sets_is_read_at_the_call(tmp_path, body, value, flagged):
    lines = f"MODEL=/m/a\nset_model() {body}\nset_model go\n{LAUNCH}\n"
    conversion = convert_launch(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == value
    assert bool(conversion.incomplete) == flagged, conversion.incomplete
    if not flagged:
        assert value == bash_model_value(tmp_path, lines)


# a test or sum as the body: the function is defined, not run where it stands
TESTS = {
    "sum": "(( N = 8 ))",
    "sum-one-word": "((N=8))",
    "test": "[[ $((N = 8)) -gt 0 ]]",
}


@pytest.mark.parametrize("body", TESTS.values(), ids=TESTS.keys())
@pytest.mark.parametrize("call", ["", "bump\n"], ids=["not-called", "called"])
def test_a_test_or_sum_as_a_body_converts_as_in_braces(tmp_path, body, call):
    def script(text: str) -> str:
        launch = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        return f"N=4\nbump() {text}\n{call}{launch} trainer.total_epochs=$N\n"

    bare, braced = (tmp_path / "bare.sh", tmp_path / "braced.sh")
    bare.write_text(script(body))
    braced.write_text(script(f"{{ {body}; }}"))
    first, second = convert_verl(bare), convert_verl(braced)
    assert first.tree == second.tree
    assert (first.incomplete, first.dropped) == (second.incomplete, second.dropped)


def test_a_test_body_closes_its_block_and_the_next_line_is_no_body():
    blocks = shell_lines.Blocks()
    blocks.read(_shell_words("ok() [[ -n $1 ]]"))
    assert blocks.open == [] and not blocks.body_next
    (piece,) = blocks.read(_shell_words("( MODEL=/m/b )"))
    assert piece.function == "" and not piece.blocked


def test_an_empty_array_or_command_keeps_its_blanks():
    assert _shell_words("A=( ) x=$( )y") == ["A=(", ")", "x=$( )y"]


SUBSHELL_OVER_LINES = f"(\n  MODEL=$1\n  {LAUNCH}\n  echo done\n)"


def _arm(pattern: str, body: str) -> str:
    """A `case` on the call's $1 whose arm `pattern` runs `body`, over lines."""
    return f'case "$1" in\n  {pattern})\n{body}\n    ;;\nesac'


# each body written on one line, beside the same body over lines: bash reads a `;` in it as
# a newline, so both convert alike (the body sets MODEL from the call's $1, then runs verl,
# then `echo done`). In a subshell written on one line, `( ...; echo done )` after a
# function's `()` or `function NAME` (or a case pattern's `)`), the `;` ended no command:
# verl was read as getting `echo` and `done` as overrides, and the script was refused
ONE_LINE = {
    "subshell": (f"( MODEL=$1; {LAUNCH}; echo done )", SUBSHELL_OVER_LINES),
    "subshell-glued": (f"(MODEL=$1;{LAUNCH};echo done)", SUBSHELL_OVER_LINES),
    "subshell-in-a-subshell": (
        f"( ( MODEL=$1; {LAUNCH} ); echo done )",
        f"(\n  (\n    MODEL=$1\n    {LAUNCH}\n  )\n  echo done\n)",
    ),
    "if": (
        f"if true; then MODEL=$1; {LAUNCH}; echo done; fi",
        f"if true\nthen\n  MODEL=$1\n  {LAUNCH}\n  echo done\nfi",
    ),
    "for": (
        f"for seed in 1; do MODEL=$1; {LAUNCH}; echo done; done",
        f"for seed in 1\ndo\n  MODEL=$1\n  {LAUNCH}\n  echo done\ndone",
    ),
    "while": (
        f"while true; do MODEL=$1; {LAUNCH}; break; done",
        f"while true\ndo\n  MODEL=$1\n  {LAUNCH}\n  break\ndone",
    ),
    "until": (
        f"until false; do MODEL=$1; {LAUNCH}; break; done",
        f"until false\ndo\n  MODEL=$1\n  {LAUNCH}\n  break\ndone",
    ),
    "case": (
        f'case "$1" in /m/c) MODEL=$1; {LAUNCH}; echo done ;; esac',
        _arm("/m/c", f"    MODEL=$1\n    {LAUNCH}\n    echo done"),
    ),
    "case-arm-subshell": (
        f'case "$1" in /m/c) ( MODEL=$1; {LAUNCH}; echo done ) ;; esac',
        _arm("/m/c", SUBSHELL_OVER_LINES),
    ),
    "case-arm-subshell-glued": (
        f'case "$1" in /m/c)(MODEL=$1;{LAUNCH};echo done);; esac',
        _arm("/m/c", SUBSHELL_OVER_LINES),
    ),
    "case-(pattern)-subshell": (
        f'case "$1" in (/m/c) ( MODEL=$1; {LAUNCH}; echo done ) ;; esac',
        _arm("(/m/c", SUBSHELL_OVER_LINES),
    ),
}


def _converts_alike(tmp_path, one_line: str, over_lines: str) -> None:
    first, second = convert_launch(tmp_path, one_line), convert_launch(tmp_path, over_lines)
    assert first.tree == second.tree
    assert (first.incomplete, first.dropped) == (second.incomplete, second.dropped)


@pytest.mark.parametrize("one_line, over_lines", ONE_LINE.values(), ids=ONE_LINE.keys())
def test_a_body_on_one_line_converts_as_over_lines_and_as_bash_runs_it(
    tmp_path, one_line, over_lines
):
    _check_with_bash(tmp_path, _script("train() ", one_line))
    _converts_alike(tmp_path, _script("train() ", one_line), _script("train() ", over_lines))


@pytest.mark.parametrize("body", ["subshell", "subshell-glued"])
@pytest.mark.parametrize("head", HEADS.values(), ids=HEADS.keys())
def test_every_way_of_naming_a_function_takes_a_subshell_on_one_line(tmp_path, head, body):
    _check_with_bash(tmp_path, _script(head, ONE_LINE[body][0]))


@pytest.mark.parametrize("body", ["case-arm-subshell", "case-(pattern)-subshell"])
def test_a_subshell_on_one_line_in_a_case_arm_at_the_top_level(tmp_path, body):
    one_line, over_lines = (f"MODEL=/m/a\nset -- /m/c\n{text}\n" for text in ONE_LINE[body])
    _check_with_bash(tmp_path, one_line)
    _converts_alike(tmp_path, one_line, over_lines)


CALLS_ITSELF = [f"( f; {LAUNCH} )", f"(f;{LAUNCH})", f"if true; then f; {LAUNCH}; fi"]


@pytest.mark.parametrize("body", CALLS_ITSELF)
def test_a_body_on_one_line_that_calls_its_function_is_named_as_in_braces(tmp_path, body):
    def conversion(text: str):
        return convert_launch(tmp_path, f"MODEL=/m/a\nf() {text}\nf\n")

    bare, braced = conversion(body), conversion(f"{{ {body}; }}")
    assert bare.notes == braced.notes and any("calls itself" in note for note in bare.notes)
    assert (bare.tree, bare.incomplete) == (braced.tree, braced.incomplete)


def test_a_regex_group_after_a_group_is_no_subshell():
    # a `(` after a `)` opens a body only where that `)` ends a function's `()` or a case
    # pattern: in `[[ =~ ]]` its `|` is the pattern's, no pipe
    assert _shell_words("[[ $x =~ (a)(b|c) ]]") == ["[[", "$x", "=~", "(a)(b|c)", "]]"]


@pytest.mark.parametrize("arm", ["(a|go) MODEL=/m/c ;;", "x) ;; (a|go) MODEL=/m/c ;;"])
def test_patterns_in_parentheses_on_one_line_read_alike_first_or_after_an_arm(tmp_path, arm):
    # a `(` after `in` opens a pattern list as after `;;`: read as nested parentheses, its
    # `|` was no pattern's and the arm that runs was never matched
    one_line = f"MODEL=/m/a\nset -- go\ncase $1 in {arm} esac\n{LAUNCH}\n"
    over_lines = one_line.replace(" in ", " in\n").replace(";; ", ";;\n")
    _check_with_bash(tmp_path, one_line)
    _converts_alike(tmp_path, one_line, over_lines)
