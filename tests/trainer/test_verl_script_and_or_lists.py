"""`mfsdp config from-verl` on the commands of an and-or list (`&&`, `||`), a pipeline and a
list run in the background (`&`): only what may not run in the script's shell is read as
maybe. The first command of an and-or list always runs (`MODEL=/m/b && python3 ...` gives
/m/b), and so does the command after a `&` (the list before it is the one run apart); both
were flagged, and the value from outside used. A list that goes on at the next line after
`&&`, `||` or `|` was read as two, so what its later command set was read as run; a
`! MODEL=/m/b` (or `time`) set nothing at all. The value expected is the one bash gives: each
script is run by bash, the verl command replaced by a line printing $MODEL where it stands."""

from __future__ import annotations

import pytest

from tests.support.verl_conversions import (
    LAUNCH,
    as_given,
)
from tests.support.verl_conversions import (
    MODEL_KEY as KEY,
)
from tests.support.verl_conversions import bash_model_value as bash_value
from tests.support.verl_conversions import convert_launch as convert

OUTSIDE = "MODEL=/m/a\n"

# what sets MODEL surely runs in the script's shell
SURELY_RUN = {
    "first-of-an-and-list": f"MODEL=/m/b && echo ok\n{LAUNCH}\n",
    "first-of-an-or-list": f"MODEL=/m/b || echo failed\n{LAUNCH}\n",
    "first-of-an-and-or-list": f"MODEL=/m/b || true && true\n{LAUNCH}\n",
    "verl-command-after-and": f"MODEL=/m/b && {LAUNCH}\n",
    "exported-first": f"export MODEL=/m/b && echo ok\n{LAUNCH}\n",
    "in-a-group": f"{{ MODEL=/m/b && true; }}\n{LAUNCH}\n",
    "after-a-background-command": f"sleep 0 & MODEL=/m/b\n{LAUNCH}\n",
    "after-a-background-list": f"true && sleep 0 & MODEL=/m/b\n{LAUNCH}\n",
    "group-after-a-background-command": f"sleep 0 & {{ MODEL=/m/b; }}\n{LAUNCH}\n",
    "after-an-and-list-and-a-semicolon": f"true && echo; MODEL=/m/b\n{LAUNCH}\n",
    "negated": f"! MODEL=/m/b\n{LAUNCH}\n",
    "timed": f"time MODEL=/m/b\n{LAUNCH}\n",
    "timed-posix": f"time -p MODEL=/m/b\n{LAUNCH}\n",
    "background-then-newline": f"sleep 0 &\nMODEL=/m/b\n{LAUNCH}\n",
    "after-a-background-loop": f"for i in 1; do MODEL=/m/c; done & MODEL=/m/b\nwait\n{LAUNCH}\n",
    "after-a-background-group": f"{{ MODEL=/m/c; }} & MODEL=/m/b\nwait\n{LAUNCH}\n",
    "verl-command-on-the-line-after-and": f"MODEL=/m/b &&\n{LAUNCH}\n",
    "verl-command-in-a-background-list": f"MODEL=/m/b && {LAUNCH} &\nwait\n",
    "first-of-a-list-in-a-subshell": f"(MODEL=/m/b && {LAUNCH})\n",
}

# what sets MODEL may not run, or runs in a subshell: the value outside stands, flagged
MAYBE_RUN = {
    "after-and": f"true && MODEL=/m/b\n{LAUNCH}\n",
    "after-or": f"false || MODEL=/m/b\n{LAUNCH}\n",
    "after-and-on-the-next-line": f"true &&\nMODEL=/m/b\n{LAUNCH}\n",
    "after-or-past-a-blank-and-a-comment": f"false ||\n\n# why\nMODEL=/m/b\n{LAUNCH}\n",
    "piped-on-the-next-line": f"echo x |\nMODEL=/m/b\n{LAUNCH}\n",
    "first-of-a-background-list": f"MODEL=/m/b && true &\nwait\n{LAUNCH}\n",
    "background-list-ending-on-the-next-line": f"MODEL=/m/b &&\ntrue &\nwait\n{LAUNCH}\n",
    "negated-pipeline": f"! MODEL=/m/b | cat\n{LAUNCH}\n",
    "first-of-a-pipeline-in-a-list": f"MODEL=/m/b | cat && true\n{LAUNCH}\n",
    "after-or-in-a-list-after-background": f"sleep 0 & false || MODEL=/m/b\n{LAUNCH}\n",
}


@pytest.mark.parametrize("lines", list(SURELY_RUN.values()), ids=list(SURELY_RUN))
def test_what_bash_surely_runs_sets_the_value(tmp_path, lines):
    conversion = convert(tmp_path, OUTSIDE + lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, OUTSIDE + lines)
    assert conversion.incomplete == []


@pytest.mark.parametrize("lines", list(MAYBE_RUN.values()), ids=list(MAYBE_RUN))
def test_what_may_not_run_in_the_scripts_shell_keeps_the_value_outside(tmp_path, lines):
    conversion = convert(tmp_path, OUTSIDE + lines)
    assert as_given(conversion)["model"]["path"] == "/m/a"
    assert conversion.incomplete == [f"{KEY}=/m/a"]


def test_a_value_read_by_the_first_command_of_a_list_is_known_only_when_it_runs(tmp_path):
    """`read` runs where it stands: the value is the running script's, named with `read`,
    not the one set before it."""
    conversion = convert(tmp_path, f"{OUTSIDE}read -r MODEL < model.txt && echo ok\n{LAUNCH}\n")
    assert as_given(conversion)["model"]["path"] == "$MODEL"
    assert conversion.incomplete == ["model.path=$MODEL"]
    assert (
        "$MODEL: set by `read` (line 2) to a value known only when the script runs"
        in conversion.notes
    )


@pytest.mark.parametrize(
    "lines", ["source env.sh &\nwait\n", "true && source env.sh & wait\n", "echo | . env.sh\n"]
)
def test_a_file_sourced_in_a_subshell_sets_nothing_for_the_script(tmp_path, lines):
    """Sourced in the background or in a pipeline, env.sh sets MODEL in a subshell only: the
    value set before stands, with nothing to check."""
    (tmp_path / "env.sh").write_text("MODEL=/m/b\n")
    text = f"{OUTSIDE}{lines}{LAUNCH}\n"
    conversion = convert(tmp_path, text)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, text)
    assert conversion.incomplete == []
