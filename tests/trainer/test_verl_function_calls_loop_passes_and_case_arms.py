"""`mfsdp config from-verl` where bash's value for the verl command turns on how a function is
called, on a loop's next pass, or on which `case` arm runs. Each was read another way, some
at exit 0 with a value bash never passes: a function called as `LR=5 train` (or from another
function's body) read the variables where its body stands; `local X=$1` and `$1` in its body
were the script's own argument, not the call's; a loop setting a variable after the verl
command ran its second pass with another value unflagged; and every `case` arm was read as
one that may not run, even where the word and patterns are written out. Each case is compared
with bash running the script."""

from __future__ import annotations

import pytest

from tests.support.verl_conversions import LAUNCH, as_given
from tests.support.verl_conversions import MODEL_KEY as KEY
from tests.support.verl_conversions import bash_model_value as bash_value
from tests.support.verl_conversions import convert_launch as convert
from trainer.verl_import import convert_verl
from trainer.verl_source import VerlSourceError

TRAIN = f"train() {{\n  {LAUNCH}\n}}\n"

# the value bash gives the verl command inside a called function
CALLS = {
    "assignment-before-the-call": f"MODEL=/m/a\n{TRAIN}MODEL=/m/b train\n",
    "assignment-before-a-one-line-body": f"train() {{ {LAUNCH}; }}\nMODEL=/m/c train\n",
    "called-from-another-function": (
        f"MODEL=/m/a\n{TRAIN}main() {{\n  MODEL=/m/b\n  train\n}}\nmain\n"
    ),
    "assignment-before-the-outer-call": (
        f"MODEL=/m/a\n{TRAIN}main() {{ train; }}\nMODEL=/m/d main\n"
    ),
    "local-from-the-argument": f"MODEL=/m/a\ntrain() {{\n  local MODEL=$1\n  {LAUNCH}\n}}\n"
    "train /m/e\n",
    "local-written-out": f"MODEL=/m/a\ntrain() {{\n  local MODEL=/m/f\n  {LAUNCH}\n}}\ntrain\n",
    "argument-with-a-default": f"train() {{\n  MODEL=${{1:-/m/g}}\n  {LAUNCH}\n}}\ntrain /m/h\n",
    "argument-not-passed": f"train() {{\n  MODEL=/m/a$2\n  {LAUNCH}\n}}\ntrain /m/x\n",
    "shifted-arguments": f"train() {{\n  shift\n  MODEL=$1\n  {LAUNCH}\n}}\ntrain /m/x /m/y\n",
    "argument-picks-a-case-arm": (
        f"train() {{\n  case $1 in\n    a) MODEL=/m/1 ;;\n    b) MODEL=/m/2 ;;\n  esac\n"
        f"  {LAUNCH}\n}}\ntrain b\n"
    ),
}


@pytest.mark.parametrize("lines", CALLS.values(), ids=CALLS.keys())
def test_a_called_function_reads_its_call_as_bash_runs_it(tmp_path, lines):
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, lines)
    assert conversion.incomplete == []


def test_calls_with_other_assignments_before_them_are_the_last_one_flagged(tmp_path):
    lines = f"train() {{ {LAUNCH}; }}\nMODEL=/m/a train\nMODEL=/m/b train\n"
    conversion = convert(tmp_path, lines)
    assert bash_value(tmp_path, lines) == "/m/a/m/b"  # one run each
    assert as_given(conversion)["model"]["path"] == "/m/b"
    assert conversion.incomplete == [f"{KEY}=/m/b"]
    assert any("called on line 2 and again on line 3" in note for note in conversion.notes)


def test_an_argument_bash_passes_only_as_the_script_runs_stays_to_edit(tmp_path):
    lines = f'train() {{\n  MODEL=$1\n  {LAUNCH}\n}}\ntrain "$@"\n'
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == "$1"
    assert conversion.incomplete == ["model.path=$1"]


# MODEL is set again after the verl command in the loop's body: the second pass gets /m/b
SET_AGAIN_IN_THE_LOOP = {
    "after-the-command": f"MODEL=/m/a\nfor s in 1 2; do\n  {LAUNCH}\n  MODEL=/m/b\ndone\n",
    "one-line-loop": f"MODEL=/m/a\nfor s in 1 2; do {LAUNCH}; MODEL=/m/b; done\n",
    "through-a-variable-set-before-it": (
        f"M=/m/a\nfor s in 1 2; do\n  MODEL=$M\n  {LAUNCH}\n  M=/m/b\ndone\n"
    ),
    "command-in-a-called-function": (
        f"MODEL=/m/a\n{TRAIN}for s in 1 2; do\n  train\n  MODEL=/m/b\ndone\n"
    ),
    "while-loop": (
        f"MODEL=/m/a\nn=0\nwhile [ $n -lt 2 ]; do\n  {LAUNCH}\n  MODEL=/m/b\n  n=$((n+1))\ndone\n"
    ),
    "command-in-an-inner-loop": (
        f"MODEL=/m/a\nfor a in 1 2; do\n  for b in 1; do\n    {LAUNCH}\n  done\n  MODEL=/m/b\n"
        "done\n"
    ),
}


@pytest.mark.parametrize("lines", SET_AGAIN_IN_THE_LOOP.values(), ids=SET_AGAIN_IN_THE_LOOP.keys())
def test_a_value_set_after_the_verl_command_in_its_loop_is_flagged(tmp_path, lines):
    conversion = convert(tmp_path, lines)
    assert bash_value(tmp_path, lines) == "/m/a/m/b"  # the first pass's, then the second's
    assert as_given(conversion)["model"]["path"] == "/m/a"
    assert conversion.incomplete == [f"{KEY}=/m/a"]
    assert any("next pass" in note for note in conversion.notes)


def test_a_loop_setting_other_variables_after_the_verl_command_is_not_flagged(tmp_path):
    lines = f"MODEL=/m/a\nfor s in 1 2; do\n  {LAUNCH}\n  OTHER=/m/b\ndone\n"
    conversion = convert(tmp_path, lines)
    assert bash_value(tmp_path, lines) == "/m/a/m/a"
    assert as_given(conversion)["model"]["path"] == "/m/a"
    assert conversion.incomplete == []


# the case word and the patterns are written out: bash runs one arm, known here
KNOWN_ARM = {
    "first-arm": (
        f"B=vllm\ncase $B in\n  vllm) MODEL=/m/v ;;\n  sglang) MODEL=/m/s ;;\nesac\n{LAUNCH}\n"
    ),
    "alternatives": (
        f'B=sglang\ncase "$B" in\n  vllm|hf) MODEL=/m/v ;;\n  sglang|x)\n    MODEL=/m/s\n    ;;\n'
        f"  *) MODEL=/m/z ;;\nesac\n{LAUNCH}\n"
    ),
    "default-arm": (
        f"B=zzz\ncase $B in\n  vllm) MODEL=/m/v ;;\n  *) MODEL=/m/z ;;\nesac\n{LAUNCH}\n"
    ),
    "no-arm": f"MODEL=/m/a\nB=zzz\ncase $B in\n  vllm) MODEL=/m/v ;;\nesac\n{LAUNCH}\n",
    "glob": f"B=qwen2-7b\ncase $B in\n  *7b) MODEL=/m/7 ;;\n  *) MODEL=/m/x ;;\nesac\n{LAUNCH}\n",
    "parenthesized-patterns": (
        f"B=b\ncase $B in (a) MODEL=/m/1 ;; (b) MODEL=/m/2 ;; esac\n{LAUNCH}\n"
    ),
    "verl-command-in-each-arm": (
        f"B=a\ncase $B in\n  a) MODEL=/m/1; {LAUNCH} ;;\n  b) MODEL=/m/2; {LAUNCH} ;;\nesac\n"
    ),
    "falls-through": (
        f"B=a\ncase $B in\n  a) MODEL=/m/1 ;&\n  b) MODEL=/m/2 ;;\n  c) MODEL=/m/3 ;;\nesac\n"
        f"{LAUNCH}\n"
    ),
    "tests-on": (
        f"B=ab\ncase $B in\n  a*) MODEL=/m/1 ;;&\n  *b) MODEL=/m/2 ;;\n  c) MODEL=/m/3 ;;\nesac\n"
        f"{LAUNCH}\n"
    ),
    "nested": (
        f"B=b\nC=c\ncase $B in\n  b)\n    case $C in\n      c) MODEL=/m/bc ;;\n"
        f"      *) MODEL=/m/bx ;;\n    esac\n    ;;\n  *) MODEL=/m/x ;;\nesac\n{LAUNCH}\n"
    ),
    "literal-word-on-one-line": (
        f"MODEL=/m/a\ncase x in x) MODEL=/m/b;; y) MODEL=/m/c;;& esac\n{LAUNCH}\n"
    ),
}


@pytest.mark.parametrize("lines", KNOWN_ARM.values(), ids=KNOWN_ARM.keys())
def test_the_case_arm_bash_runs_is_read_as_run_where_it_is_known(tmp_path, lines):
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, lines)
    assert conversion.incomplete == []
    assert not any("starts verl 2 times" in note for note in conversion.notes)


# the case word's value is known only when the script runs: each arm may run, flagged
UNKNOWN_ARM = {
    "unset-variable": "case $UNSET in\n",
    "argument-of-the-script": "case ${1:-x} in\n",
    "set-in-a-branch": 'B=x\nif [ -n "$HOME" ]; then B=y; fi\ncase $B in\n',
    "command-output": "case $(hostname) in\n",
}


@pytest.mark.parametrize("header", UNKNOWN_ARM.values(), ids=UNKNOWN_ARM.keys())
def test_a_case_arm_that_may_not_run_keeps_the_value_outside_flagged(tmp_path, header):
    lines = f"MODEL=/m/a\n{header}  x) MODEL=/m/b ;;\nesac\n{LAUNCH}\n"
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == "/m/a"
    assert conversion.incomplete == [f"{KEY}=/m/a"]


def two_arms(before: str, word: str, first: str, second: str) -> str:
    """`before`, then a case of `word` whose arm `first` sets /m/1, `second` /m/2."""
    arms = f"  {first}) MODEL=/m/1 ;;\n  {second}) MODEL=/m/2 ;;\n"
    return f"{before}\ncase {word} in\n{arms}esac\n{LAUNCH}\n"


# a pattern quoted or escaped matches itself, an empty one an empty value: bash's arm
QUOTED_PATTERNS = {
    "quoted-glob": two_arms("B=vllm", "$B", '"v*"', "*"),
    "quoted-glob-matching-itself": two_arms("", "'v*'", "'v*'", "*"),
    "escaped-question-mark": two_arms("B=x", "$B", "\\?", "*"),
    "escaped-star": two_arms("B=x", "$B", "\\*", "x"),
    "quoted-parenthesis": two_arms('B="a)"', "$B", '"a)"', "*"),
    "empty-pattern": two_arms("B=", "$B", '""', "*"),
    "empty-alternative": two_arms("B=", "$B", "x|''", "*"),
    "blank-before-the-parenthesis": two_arms("B=x", "$B", "'x' ", "*"),
}


@pytest.mark.parametrize("lines", QUOTED_PATTERNS.values(), ids=QUOTED_PATTERNS.keys())
def test_a_quoted_or_empty_case_pattern_picks_the_arm_bash_runs(tmp_path, lines):
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, lines)
    assert conversion.incomplete == []


def test_quoted_brackets_and_stars_in_values_are_kept_as_written(tmp_path):
    lines = f"B='a*?b'\nMODEL=\"/m/$B\"\n{LAUNCH}\n"
    assert as_given(convert(tmp_path, lines))["model"]["path"] == bash_value(tmp_path, lines)


SET_M = "setm() { MODEL=/m/b; }\n"
# a function that does not start verl, defined before the value it changes is set (a
# variable a function body sets is flagged where it was set before: the function may be
# called where this does not see it), sets what a verl command after its call reads
CALLED_SETTERS = {
    "sets-the-value": f"{SET_M}MODEL=/m/a\nsetm\n{LAUNCH}\n",
    "sets-the-case-word": (
        f"setb() {{ B=sglang; }}\nB=vllm\nsetb\ncase $B in\n  vllm) MODEL=/m/v ;;\n"
        f"  sglang) MODEL=/m/s ;;\nesac\n{LAUNCH}\n"
    ),
    "local-put-back": f"setm() {{ local MODEL=/m/b; }}\nMODEL=/m/a\nsetm\n{LAUNCH}\n",
    "local-then-set": f"setm() {{\n  local MODEL\n  MODEL=/m/b\n}}\nMODEL=/m/a\nsetm\n{LAUNCH}\n",
    "declare-is-local": f"setm() {{ declare MODEL=/m/b; }}\nMODEL=/m/a\nsetm\n{LAUNCH}\n",
    "declare-g-is-global": f"setm() {{ declare -g MODEL=/m/b; }}\nMODEL=/m/a\nsetm\n{LAUNCH}\n",
    "prefix-assignment-put-back": f"{SET_M}MODEL=/m/a\nMODEL=/m/c setm\n{LAUNCH}\n",
    "set-by-a-function-it-calls": f"{SET_M}outer() {{ setm; }}\nMODEL=/m/a\nouter\n{LAUNCH}\n",
    "set-by-a-verl-function-before": (
        f"train() {{\n  MODEL=/m/b\n  {LAUNCH}\n}}\nMODEL=/m/a\ntrain\n{LAUNCH}\n"
    ),
}


@pytest.mark.parametrize("lines", CALLED_SETTERS.values(), ids=CALLED_SETTERS.keys())
def test_what_a_called_function_sets_stands_after_its_call(tmp_path, lines):
    conversion = convert(tmp_path, lines)
    assert (
        as_given(conversion)["model"]["path"] == bash_value(tmp_path, lines)[-4:]
    )  # the last run's
    assert conversion.incomplete == []


@pytest.mark.parametrize("call", ['if [ -n "$NOT_SET" ]; then setm; fi', "false && setm"])
def test_a_setting_function_called_where_it_may_not_run_is_flagged(tmp_path, call):
    lines = f"{SET_M}MODEL=/m/a\n{call}\n{LAUNCH}\n"
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, lines) == "/m/a"
    assert conversion.incomplete == [f"{KEY}=/m/a"]


# the function's own arguments and locals, as bash gives them
ARGUMENTS_AND_LOCALS = {
    "shift-past-the-arguments": (
        f"train() {{\n  shift 3\n  MODEL=$1\n  {LAUNCH}\n}}\ntrain /m/a /m/b\n"
    ),
    "local-without-a-value": (
        f"MODEL=/m/a\ntrain() {{\n  local MODEL\n  MODEL=${{MODEL-/m/u}}\n  {LAUNCH}\n}}\ntrain\n"
    ),
    "local-without-a-value-is-empty": (
        f"MODEL=/m/a\ntrain() {{\n  local MODEL\n  MODEL=/m/e$MODEL\n  {LAUNCH}\n}}\ntrain\n"
    ),
    "declare-without-a-value": (
        f"MODEL=/m/a\ntrain() {{\n  declare MODEL\n  MODEL=${{MODEL:-/m/d}}\n  {LAUNCH}\n}}\n"
        "train\n"
    ),
}


@pytest.mark.parametrize("lines", ARGUMENTS_AND_LOCALS.values(), ids=ARGUMENTS_AND_LOCALS.keys())
def test_a_call_reads_its_arguments_and_locals_as_bash_does(tmp_path, lines):
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, lines)
    assert conversion.incomplete == []


def test_a_function_that_starts_verl_calling_itself_is_flagged(tmp_path):
    lines = (
        f'train() {{\n  MODEL=$1\n  {LAUNCH}\n  if [ "$1" = /m/a ]; then train /m/b; fi\n}}\n'
        "train /m/a\n"
    )
    conversion = convert(tmp_path, lines)
    assert bash_value(tmp_path, lines) == "/m/a/m/b"  # two runs
    assert f"{KEY}=/m/a" in conversion.incomplete
    assert any("train (which starts verl) calls itself" in note for note in conversion.notes)


@pytest.mark.parametrize("launches", [False, True], ids=["setting-functions", "verl-at-the-end"])
def test_a_deep_chain_of_calls_is_refused_in_one_line(tmp_path, launches):
    first = f"f0() {{ {LAUNCH}; }}\n" if launches else "f0() { MODEL=/m/a; }\n"
    chain = "".join(f"f{n}() {{ f{n - 1}; }}\n" for n in range(1, 1100))
    lines = f"{first}{chain}f1099\n{'' if launches else LAUNCH}\n"
    with pytest.raises(VerlSourceError, match=r"more than \d+ deep .*: not a launch script$"):
        convert(tmp_path, lines)


# each way bash takes a function's definition, the body read where it is called
DEFINITIONS = {
    "no-blank": "train(){\n  @\n}\n",
    "one-line-no-blank": "train(){ @; }\n",
    "blank-before-the-parentheses": "train () {\n  @\n}\n",
    "brace-on-the-next-line": "train()\n{\n  @\n}\n",
    "keyword": "function train {\n  @\n}\n",
    "keyword-and-parentheses": "function train() {\n  @\n}\n",
    "keyword-and-parentheses-no-blank": "function train(){ @; }\n",
}


@pytest.mark.parametrize("definition", DEFINITIONS.values(), ids=DEFINITIONS.keys())
def test_every_form_of_a_function_definition_is_read_at_its_call(tmp_path, definition):
    lines = f"MODEL=/m/a\n{definition.replace('@', LAUNCH)}MODEL=/m/b\ntrain\n"
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, lines) == "/m/b"
    assert conversion.incomplete == []


def test_a_function_never_called_without_a_blank_before_its_brace_is_not_run(tmp_path):
    lines = f"MODEL=/m/a\nuse_other(){{\n  MODEL=/m/b\n}}\n{LAUNCH}\n"
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, lines) == "/m/a"


def test_arguments_a_function_passes_on_are_its_own_known_ones(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "train() {\n  shift\n"
        '  python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo "$@"\n}\n'
        f"train x {KEY}=/m/a trainer.total_epochs=3\n"
    )
    conversion = convert_verl(script)
    assert as_given(conversion)["model"]["path"] == "/m/a"
    assert as_given(conversion)["trainer"]["epochs"] == 3
    assert not any("passes" in note for note in conversion.notes)
