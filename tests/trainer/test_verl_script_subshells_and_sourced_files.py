"""`mfsdp config from-verl` on what a launch script runs in a subshell (`( ... )`, a pipeline's
elements, `{ ...; } | tee log`) and on commands that run text it does not read (`source
FILE`, `. FILE`, `eval ...`). A group piped to `tee` was read as run in the script's shell
(its MODEL reached the verl command after it at exit 0), a loop piped to `cat` set its
name for the script, a verl command inside `( ... )` got the value from outside it (and a
`)` on its last value), and a variable a sourced file sets went unnoticed. The value
expected is the one bash gives: each script is run by bash, the verl command replaced by a
line printing $MODEL where it stands."""

from __future__ import annotations

import pytest

from tests.support.verl_conversions import (
    LAUNCH,
    as_given,
)
from tests.support.verl_conversions import (
    MODEL_KEY as KEY,
)
from tests.support.verl_conversions import (
    MODEL_LAUNCH as USE,
)
from tests.support.verl_conversions import bash_model_value as bash_value
from tests.support.verl_conversions import convert_launch as convert

OUTSIDE = "MODEL=/m/a\n"

# the verl command inside a subshell or a piped group: it gets what is set before it there
INSIDE = {
    "group-piped-to-tee": f"{{\n  MODEL=/m/b\n  {LAUNCH}\n}} 2>&1 | tee log\n",
    "one-line-subshell": f"(MODEL=/m/b; {LAUNCH})\n",
    "subshell-piped-to-tee": f"(\n  MODEL=/m/b\n  {LAUNCH}\n) | tee log\n",
    "group-after-a-pipe": f"echo x | {{\n  MODEL=/m/b\n  {LAUNCH}\n}}\n",
}

# the verl command after a subshell that sets MODEL: bash keeps the value from before it
AFTER = {
    "one-line-group-piped": "{ MODEL=/m/b; } | tee log\n",
    "group-piped-after-redirections": "{\n  echo start\n  MODEL=/m/b\n} 2>&1 | tee log\n",
    "group-in-the-background": "{ MODEL=/m/b; } &\nwait\n",
    "subshell-piped": "( MODEL=/m/b ) | cat\n",
    "loop-piped": "for MODEL in /m/b; do :; done | cat\n",
    "while-read-in-a-pipeline": "printf '/m/b\\n' | while read -r MODEL; do :; done\n",
    "nested-subshells": "( ( MODEL=/m/b ); MODEL=/m/c )\n",
}


@pytest.mark.parametrize("lines", list(INSIDE.values()), ids=list(INSIDE))
def test_a_verl_command_in_a_subshell_gets_what_is_set_before_it_there(tmp_path, lines):
    conversion = convert(tmp_path, OUTSIDE + lines)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, OUTSIDE + lines)
    assert conversion.incomplete == []


@pytest.mark.parametrize("lines", list(AFTER.values()), ids=list(AFTER))
def test_what_a_subshell_sets_is_not_seen_after_it(tmp_path, lines):
    """The value from before the subshell stands, as in bash; the key is named to check, as
    for any variable set in a subshell (docs/verl.md)."""
    text = OUTSIDE + lines + LAUNCH + "\n"
    conversion = convert(tmp_path, text)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, text)
    assert conversion.incomplete == [f"{KEY}=/m/a"]
    assert not any("set by a `for` loop" in note for note in conversion.notes)


# commands that run text not read here: env.sh sets MODEL, which bash's verl command gets
OPAQUE = {
    "source": "source ./env.sh\n",
    "dot": ". ./env.sh\n",
    "eval": 'eval "$(cat env.sh)"\n',
    "source-in-an-if": "if [ -f env.sh ]; then source ./env.sh; fi\n",
}


@pytest.mark.parametrize("command", list(OPAQUE), ids=list(OPAQUE))
def test_a_variable_not_set_after_a_sourced_file_is_named_with_its_line(tmp_path, command):
    """bash gives the sourced file's /m/env; the file is not read here, so the key whose
    variable no assignment after it sets is to check, naming the variable and the line."""
    (tmp_path / "env.sh").write_text("MODEL=/m/env\n")
    text = "echo start\n" + OUTSIDE + OPAQUE[command] + LAUNCH + "\n"
    conversion = convert(tmp_path, text)
    assert bash_value(tmp_path, text) == "/m/env" != as_given(conversion)["model"]["path"]
    assert conversion.incomplete == [f"{KEY}=/m/a"]
    note = next(note for note in conversion.notes if note.startswith(f"{KEY}=/m/a: $MODEL "))
    assert "(line 3)" in note and "may be set by `" in note


def test_a_default_for_a_variable_a_sourced_file_may_set_is_named(tmp_path):
    (tmp_path / "env.sh").write_text("MODEL=/m/env\n")
    text = "source ./env.sh\n" + USE.replace("$MODEL", "${MODEL:-/m/default}") + "\n"
    conversion = convert(tmp_path, text)
    assert conversion.incomplete == [f"{KEY}=/m/default"]


# a sourced file whose settings the verl command does not use changes nothing
UNCHANGED = {
    "set-after-the-source": "source ./env.sh\nMODEL=/m/a\n",
    "set-from-a-default-after-the-source": 'source ./env.sh\nMODEL=${MODEL_DIR:-"/m/a"}\n',
    "source-in-a-subshell": OUTSIDE + "( source ./env.sh )\n",
    "source-after-the-command": OUTSIDE + f"{LAUNCH}\nsource ./env.sh\n",
}


@pytest.mark.parametrize("lines", list(UNCHANGED.values()), ids=list(UNCHANGED))
def test_a_sourced_file_before_every_assignment_used_changes_nothing(tmp_path, lines):
    """`source ~/.bashrc` or a toolkit's set_env.sh at the top of a script, as verl's own
    examples have it, converts as it did."""
    (tmp_path / "env.sh").write_text("OTHER=1\n")
    text = lines if LAUNCH in lines else lines + LAUNCH + "\n"
    conversion = convert(tmp_path, text)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, text) == "/m/a"
    assert conversion.incomplete == []


# environment set-ups run after the assignments: they set PATH, VIRTUAL_ENV, CONDA_*, none
# a launch reads (conda's hook is not run under bash here: the value compared is the script's)
ENVIRONMENT_SETUPS = {
    "conda-hook": 'eval "$(conda shell.bash hook)"\n',
    "conda-hook-by-path": 'eval "$(/opt/conda/bin/conda shell.bash hook)"\n',
    "venv-activate": "source /opt/venv/bin/activate\n",
    "conda-profile": ". ~/miniconda3/etc/profile.d/conda.sh\n",
    "old-conda-activate": "source activate rl\n",
}


@pytest.mark.parametrize("setup", list(ENVIRONMENT_SETUPS.values()), ids=list(ENVIRONMENT_SETUPS))
def test_an_environment_set_up_after_the_assignments_flags_nothing(tmp_path, setup):
    conversion = convert(tmp_path, OUTSIDE + setup + USE + "\n")
    assert as_given(conversion)["model"]["path"] == "/m/a"
    assert conversion.incomplete == []
