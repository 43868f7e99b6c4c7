"""`mfsdp config from-verl` on a script whose verl command stands in a function's body (bash
expands its variables where the function is called, not where it is defined: the values set
between the two were lost, at exit 0), or in a loop body or `if` branch that sets a variable
before it (the value from outside was used, flagged with a wrong note). Each case is
compared with bash running the script."""

from __future__ import annotations

import pytest

from tests.support.verl_conversions import LAUNCH, as_given
from tests.support.verl_conversions import MODEL_KEY as KEY
from tests.support.verl_conversions import bash_model_value as bash_value
from tests.support.verl_conversions import convert_launch as convert

# MODEL is set again between the function's definition and its call
CALLED_LATER = {
    "body-on-its-own-lines": f"MODEL=/m/a\ntrain() {{\n  {LAUNCH}\n}}\nMODEL=/m/b\ntrain\n",
    "one-line-body": f"MODEL=/m/a\ntrain() {{ {LAUNCH}; }}\nMODEL=/m/b\ntrain\n",
    "function-keyword": f"MODEL=/m/a\nfunction train {{\n  {LAUNCH}\n}}\nMODEL=/m/b\ntrain\n",
    "body-on-the-next-line": f"MODEL=/m/a\ntrain ()\n{{\n  {LAUNCH}\n}}\nMODEL=/m/b\ntrain\n",
    "subshell-in-the-body": f"MODEL=/m/a\nf() {{\n  (\n    {LAUNCH}\n  )\n}}\nMODEL=/m/b\nf\n",
    "piped-call": f"MODEL=/m/a\ntrain() {{\n  {LAUNCH}\n}}\nMODEL=/m/b\ntrain 2>&1 | cat\n",
    "called-after-and": f"MODEL=/m/a\ntrain() {{\n  {LAUNCH}\n}}\nMODEL=/m/b\ntrue && train\n",
    "set-only-before-the-call": f"train() {{\n  {LAUNCH}\n}}\nMODEL=/m/b\ntrain\n",
}


@pytest.mark.parametrize("lines", CALLED_LATER.values(), ids=CALLED_LATER.keys())
def test_a_verl_command_in_a_function_reads_the_variables_where_it_is_called(tmp_path, lines):
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, lines)
    assert conversion.incomplete == []


def test_a_function_called_twice_with_other_values_is_the_last_call_flagged(tmp_path):
    lines = f"train() {{\n  {LAUNCH}\n}}\nMODEL=/m/a\ntrain\nMODEL=/m/b\ntrain\n"
    conversion = convert(tmp_path, lines)
    last = bash_value(tmp_path, f"train() {{\n  {LAUNCH}\n}}\nMODEL=/m/a\nMODEL=/m/b\ntrain\n")
    assert as_given(conversion)["model"]["path"] == last
    assert conversion.incomplete == [f"{KEY}={last}"]
    assert any("called on line 5 and again on line 7" in note for note in conversion.notes)


def test_a_function_called_twice_with_the_same_values_is_not_flagged(tmp_path):
    lines = f"MODEL=/m/a\ntrain() {{\n  {LAUNCH}\n}}\nMODEL=/m/b\ntrain\ntrain\n"
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == "/m/b"
    assert conversion.incomplete == []


# MODEL is set in the same loop body or `if` branch as the verl command, before it: whenever
# the command runs, that value is the one it gets
SET_IN_ITS_BRANCH = {
    "loop-body": f"MODEL=/m/a\nfor seed in 1; do\n  MODEL=/m/b\n  {LAUNCH}\ndone\n",
    "one-line-loop": f"MODEL=/m/a\nfor seed in 1; do MODEL=/m/b; {LAUNCH}; done\n",
    "if-branch": f"MODEL=/m/a\nif true; then\n  MODEL=/m/b\n  {LAUNCH}\nfi\n",
    "else-branch": f"MODEL=/m/a\nif false; then\n  :\nelse\n  MODEL=/m/b\n  {LAUNCH}\nfi\n",
    "nested-if-in-a-loop": (
        f"MODEL=/m/a\nwhile true; do\n  MODEL=/m/b\n  if true; then\n    {LAUNCH}\n  fi\n"
        "  break\ndone\n"
    ),
}


@pytest.mark.parametrize("lines", SET_IN_ITS_BRANCH.values(), ids=SET_IN_ITS_BRANCH.keys())
def test_a_value_set_before_the_verl_command_in_its_own_branch_is_the_one_it_gets(tmp_path, lines):
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, lines) == "/m/b"
    assert conversion.incomplete == []


# MODEL is set in a branch the verl command is not in: the value from before stands, flagged
SET_IN_ANOTHER_BRANCH = {
    "then-branch-before-else": f"MODEL=/m/a\nif false; then\n  MODEL=/m/b\nelse\n  {LAUNCH}\nfi\n",
    "after-the-loop": f"MODEL=/m/a\nfor seed in; do\n  MODEL=/m/b\ndone\n{LAUNCH}\n",
    "after-the-if": f"MODEL=/m/a\nif false; then\n  MODEL=/m/b\nfi\n{LAUNCH}\n",
}


@pytest.mark.parametrize("lines", SET_IN_ANOTHER_BRANCH.values(), ids=SET_IN_ANOTHER_BRANCH.keys())
def test_a_value_set_in_another_branch_keeps_the_one_before_flagged(tmp_path, lines):
    conversion = convert(tmp_path, lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, lines) == "/m/a"
    assert conversion.incomplete == [f"{KEY}=/m/a"]
