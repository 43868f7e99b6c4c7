"""`mfsdp config from-verl` on a double-quoted word whose `$(...)`, `${...}` or backquotes hold
quotes of their own (`"$(basename "$M")-run"`). bash starts quoting afresh inside each: the
inner `"` opens a quote, it does not close the outer one. Read as closing it, the `)` of the
`$(` was taken as quoted text, the line could not be split and was skipped without a word:
`MODEL="$(cat "model.txt")"` kept the MODEL set before it at exit 0, and a verl command with
`trainer.experiment_name="$(basename "$MODEL")-grpo"` was refused as one whose quotes do not
close. Each form is compared with bash running the script."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.interop_layouts import run_cli
from tests.support.verl_conversions import LAUNCH, MODEL_LAUNCH, as_given
from tests.support.verl_conversions import bash_model_value as bash_value
from tests.support.verl_conversions import convert_launch as convert
from trainer.shell_quoting import literal
from trainer.shell_variables import Variables
from trainer.verl_script_lines import _shell_words

# MODEL set to each form after an earlier value (`date` at a fixed time, in UTC, so that
# bash's value does not turn on when the test runs)
FORMS = {
    "date-format-quoted": '"$(date -u -d @0 +"%Y%m%d")-run"',
    "echo-quoted": '"$(echo "a")"',
    "two-substitutions": '"x-$(echo a)-$(echo "b")"',
    "parentheses-after-it": '"run_$(date -u -d @0 "+%m")_(v2)"',
    "basename-of-a-variable": '"$(basename "$PWD")"',
    "default-quoted": '"${NAME:-"dflt"}"',
    "default-quoted-with-a-blank": '"${NAME:-"d f"}"',
    "apostrophe-in-inner-quotes": '''"$(echo "it's")"''',
    "quoted-parenthesis-inside": '"$(echo ")")-x"',
    "backquotes-with-quotes": '"`echo "a b"`-b"',
    "translated-string-in-a-default": '"${NAME:-$"d f"}"',
}


def bash_reads(tmp_path, value: str) -> str:
    """What bash makes of `value` written in double quotes (as a converted value is shown)."""
    done = subprocess.run(
        ["bash", "-c", f'printf %s "{value}"'],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_a_quoted_word_with_quotes_inside_a_substitution_is_read_as_bash_does(
    tmp_path, monkeypatch, form
):
    monkeypatch.chdir(tmp_path)  # $PWD as bash has it running the script
    monkeypatch.setenv("PWD", str(tmp_path))
    lines = f"MODEL=/m/before\nMODEL={form}\n{LAUNCH}\n"
    conversion = convert(tmp_path, lines)
    value = as_given(conversion)["model"]["path"]
    expected = bash_value(tmp_path, lines)
    assert bash_reads(tmp_path, value) == expected  # never the value set before it
    assert value == expected or f"model.path={value}" in conversion.incomplete


def test_an_assignment_from_a_quoted_substitution_is_flagged_not_skipped(tmp_path):
    """bash sets MODEL from the file; the converter kept the earlier value."""
    (tmp_path / "model.txt").write_text("/m/from-file\n")
    script = tmp_path / "run.sh"
    script.write_text(f'MODEL=Qwen/Qwen2.5-0.5B\nMODEL="$(cat "model.txt")"\n{MODEL_LAUNCH}\n')
    code, out, _ = run_cli("config", "from-verl", script)
    assert code == 1
    assert 'model.path=$(cat "model.txt"): a shell command substitution, not run here' in out
    assert "Qwen/Qwen2.5-0.5B" not in out


def test_a_verl_command_with_a_quoted_substitution_converts_with_it_flagged(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        f"MODEL=Qwen/Qwen2.5-0.5B\n{MODEL_LAUNCH} \\\n"
        '    trainer.experiment_name="$(basename "$MODEL")-grpo"\n'
    )
    code, out, err = run_cli("config", "from-verl", script)
    assert code == 1, err
    flagged = 'trainer.experiment_name=$(basename "Qwen/Qwen2.5-0.5B")-grpo: a shell command'
    assert flagged in out


# a default's quotes inside a double-quoted `${...}`: a `'` is text there (bash keeps it), a `"`
# quotes; unquoted, both quote
DEFAULT_QUOTES = {
    "single-quoted-in-double-quotes": "\"${UNSET:-'a'}\"",
    "single-quoted-with-a-blank-in-double-quotes": "\"${UNSET:-'a b'}\"",
    "single-quoted-unquoted": "${UNSET:-'a'}",
    "single-quoted-with-a-blank-unquoted": "${UNSET:-'a b'}",
    "double-quoted-in-double-quotes": '"${UNSET:-"a"}"',
    "single-quotes-inside-inner-double-quotes": '"${UNSET:-"\'a\'"}"',
    "a-blank-in-double-quotes": '"${UNSET:-a b}"',
    "set-variable-in-double-quotes": "\"${SET:-'a'}\"",
    "alternative-of-a-set-variable": "\"${SET:+'a'}\"",
    "assigned-default": "\"${UNSET:='a'}\"",
    "translated-string-in-double-quotes": '"${UNSET:-$"a b"}"',
    "translated-string-unquoted": '${UNSET:-$"a"}',
}


@pytest.mark.parametrize("form", DEFAULT_QUOTES.values(), ids=DEFAULT_QUOTES.keys())
def test_a_default_keeps_the_quotes_bash_keeps(tmp_path, form):
    """MODEL as the script's variables make it, before verl reads it as an override (whose
    own quotes `'a'` then reads as `a`, as Hydra does)."""
    lines = ["a=/m/not-this", "SET=/m/set", f"MODEL={form}"]  # `$"a"` is no `$a`
    variables = Variables(max_chars=10_000)
    for line in lines:
        variables.read_line(_shell_words(line))
    expected = bash_value(tmp_path, "\n".join([*lines, LAUNCH]))
    assert literal(variables.values["MODEL"]) == expected


def test_ansi_c_quoting_in_a_double_quoted_default_is_refused_naming_it(tmp_path):
    """bash decodes `$'...'` there too: kept as the text `$'/m/a'` it became the model path."""
    script = tmp_path / "run.sh"
    script.write_text(f"MODEL=\"${{UNSET:-$'/m/a'}}\"\n{MODEL_LAUNCH}\n")
    code, _, err = run_cli("config", "from-verl", script)
    assert code == 2
    assert "$MODEL (in its value) is written in bash's $'...' quoting" in err
