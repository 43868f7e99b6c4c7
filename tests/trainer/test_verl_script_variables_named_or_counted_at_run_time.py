"""`mfsdp config from-verl` on commands that set a variable whose name, or whose value, only
the running script knows, and on environment set-ups around them. `export $(cat .env)`,
`declare "$NAME=..."`, `printf -v "$VAR"`, a `while read k v; do export "$k=$v"` loop and
`builtin source`/`command .` set MODEL unseen (the earlier value converted at exit 0), as
did arithmetic (`(( MODEL = MODEL * 2 ))`, `((MODEL++))`, `: $((MODEL=8))`); and conda's
hook with its options or redirections, micromamba's, and the block `conda init` writes were
flagged as if they could set the launch's variables. The value expected is bash's: each
script is run by bash, the verl command replaced by a line printing $MODEL where it stands."""

from __future__ import annotations

import pytest

from tests.support.verl_conversions import LAUNCH, as_given
from tests.support.verl_conversions import MODEL_KEY as KEY
from tests.support.verl_conversions import bash_model_value as bash_value
from tests.support.verl_conversions import convert_launch as convert

OUTSIDE = "MODEL=/m/a\n"

# each sets MODEL from env.sh (`MODEL=/m/env`) on line 2, by a name made as it runs
NAMED_AT_RUN_TIME = {
    "builtin-source": "builtin source ./env.sh\n",
    "command-dot": "command . ./env.sh\n",
    "export-of-a-command-substitution": "export $(grep -v '^#' env.sh | xargs)\n",
    "declare-x-of-a-command-substitution": "declare -x $(cat env.sh)\n",
    "quoted-export-of-a-command-substitution": 'export "$(cat env.sh | head -1)"\n',
    "declare-of-a-named-variable": 'NAME=MODEL; declare "$NAME=/m/env"\n',
    "printf-v-of-a-named-variable": 'VAR=MODEL; printf -v "$VAR" %s /m/env\n',
    "read-loop-exporting": 'while IFS== read -r k v; do export "$k=$v"; done < env.sh\n',
}


@pytest.mark.parametrize("command", list(NAMED_AT_RUN_TIME.values()), ids=list(NAMED_AT_RUN_TIME))
def test_a_variable_set_by_a_name_made_as_the_script_runs_is_named_to_check(tmp_path, command):
    (tmp_path / "env.sh").write_text("MODEL=/m/env\n")
    text = OUTSIDE + command + LAUNCH + "\n"
    conversion = convert(tmp_path, text)
    assert bash_value(tmp_path, text) == "/m/env" != as_given(conversion)["model"]["path"]
    assert conversion.incomplete == [f"{KEY}=/m/a"]
    note = next(note for note in conversion.notes if note.startswith(f"{KEY}=/m/a: $MODEL "))
    assert "may be set by `" in note and "(line 2)" in note


def test_an_export_through_builtin_sets_the_variable(tmp_path):
    text = OUTSIDE + "builtin export MODEL=/m/b\n" + LAUNCH + "\n"
    conversion = convert(tmp_path, text)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, text) == "/m/b"
    assert conversion.incomplete == []


# each sets MODEL (4 before it) by arithmetic on line 2, shown as in the note
ARITHMETIC = {
    "compound-with-spaces": ("(( MODEL = MODEL * 8 ))\n", "`(( ))`"),
    "post-increment": ("((MODEL++))\n", "`(( ))`"),
    "pre-decrement": ("(( --MODEL ))\n", "`(( ))`"),
    "add-assign": ("((MODEL+=1))\n", "`(( ))`"),
    "shift-assign": ("(( MODEL <<= 2 ))\n", "`(( ))`"),
    "expansion-after-colon": (": $((MODEL=8))\n", "`$(( ))`"),
    "expansion-in-an-assignment": ("X=$((MODEL*=3))\n", "`$(( ))`"),
    "expansion-in-a-command": ("echo $((MODEL |= 1))\n", "`$(( ))`"),
    "let-pre-increment": ("let ++MODEL\n", "`let`"),
}


@pytest.mark.parametrize("setter", list(ARITHMETIC.values()), ids=list(ARITHMETIC))
def test_a_variable_set_by_arithmetic_is_left_to_edit_naming_what_sets_it(tmp_path, setter):
    lines, what = setter
    text = "MODEL=4\n" + lines + LAUNCH + "\n"
    conversion = convert(tmp_path, text)
    assert bash_value(tmp_path, text) != "4"
    assert as_given(conversion)["model"]["path"] == "$MODEL"
    assert "model.path=$MODEL" in conversion.incomplete
    assert (
        f"$MODEL: set by {what} (line 2) to a value known only when the script runs"
        in conversion.notes
    )


# arithmetic that reads N without setting it
COMPARISONS = {
    "if-at-least": "if (( N >= 4 )); then echo big; fi\n",
    "equal": "(( N == 4 )) && echo four\n",
    "not-equal-in-an-expansion": "echo $(( N != 4 ))\n",
    "at-most": "(( N <= 4 )) || echo small\n",
}


@pytest.mark.parametrize("lines", list(COMPARISONS.values()), ids=list(COMPARISONS))
def test_arithmetic_that_only_reads_a_variable_keeps_its_value(tmp_path, lines):
    text = "N=4\n" + lines + "MODEL=/m/$N\n" + LAUNCH + "\n"
    conversion = convert(tmp_path, text)
    assert as_given(conversion)["model"]["path"] == bash_value(tmp_path, text) == "/m/4"
    assert not any("known only when the script runs" in note for note in conversion.notes)


CONDA_INIT = """__conda_setup="$('/opt/miniconda3/bin/conda' 'shell.bash' 'hook' 2> /dev/null)"
if [ $? -eq 0 ]; then
    eval "$__conda_setup"
else
    if [ -f "/opt/miniconda3/etc/profile.d/conda.sh" ]; then
        . "/opt/miniconda3/etc/profile.d/conda.sh"
    else
        export PATH="/opt/miniconda3/bin:$PATH"
    fi
fi
unset __conda_setup
"""

# environment set-ups after the assignments: they set PATH, CONDA_*, none a launch reads
ENVIRONMENT_SETUPS = {
    "conda-hook-quiet": 'eval "$(conda shell.bash hook 2>/dev/null)"\n',
    "conda-hook-quoted-path": (
        "eval \"$('/opt/conda/bin/conda' 'shell.bash' 'hook' 2> /dev/null)\"\n"
    ),
    "micromamba-hook": 'eval "$(micromamba shell hook --shell bash)"\n',
    "mamba-hook": 'eval "$(mamba shell hook --shell=bash)"\n',
    "conda-init-block": CONDA_INIT,
}


@pytest.mark.parametrize("setup", list(ENVIRONMENT_SETUPS.values()), ids=list(ENVIRONMENT_SETUPS))
def test_an_environment_set_up_with_options_or_as_conda_init_writes_it_flags_nothing(
    tmp_path, setup
):
    conversion = convert(tmp_path, OUTSIDE + setup + LAUNCH + "\n")
    assert as_given(conversion)["model"]["path"] == "/m/a"
    assert conversion.incomplete == []


# what `eval` runs here is more than a set-up: the file's MODEL reaches the verl command
NOT_SETUPS = {
    "hook-then-a-file": 'eval "$(conda shell.bash hook 2>/dev/null; cat env.sh)"\n',
    "a-variable-holding-a-file": 'SETUP="$(cat env.sh)"\neval "$SETUP"\n',
}


@pytest.mark.parametrize("setup", list(NOT_SETUPS.values()), ids=list(NOT_SETUPS))
def test_an_eval_of_more_than_a_set_up_is_named_to_check(tmp_path, setup):
    (tmp_path / "env.sh").write_text("MODEL=/m/env\n")
    text = OUTSIDE + setup + LAUNCH + "\n"
    conversion = convert(tmp_path, text)
    assert bash_value(tmp_path, text) == "/m/env" != as_given(conversion)["model"]["path"]
    assert conversion.incomplete == [f"{KEY}=/m/a"]
