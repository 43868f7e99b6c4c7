"""`mfsdp config from-verl` reads a launch script's quoting forms, continuations, here-docs
and variables as bash does (trainer/shell_lines.py, shell_quoting.py, shell_variables.py),
or refuses them in one line: each case below put a wrong value into the config, silently or
as a YAML mapping, before. The values bash gives are in the comments (checked with bash)."""

from __future__ import annotations

import time

import pytest

from tests.support.verl_conversions import as_given
from trainer.verl_import import VerlSourceError, convert_verl

LAUNCH = "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=/m"


def convert(tmp_path, text: str):
    script = tmp_path / "run.sh"
    script.write_text(text)
    return convert_verl(script)


def trainer_keys(tmp_path, text: str) -> dict:
    return as_given(convert(tmp_path, text)).get("trainer", {})


def test_ansi_c_quoting_is_refused_naming_the_variable(tmp_path):
    """`NAME=$'evil\\nmodel:\\n  path: /etc'` was read as the text `$evil\\nmodel:...`, which
    YAML made a mapping ("expects a string or null, got {'$evil\\\\nmodel:...': '/etc'}")."""
    text = f"NAME=$'evil\\nmodel:\\n  path: /etc'\n{LAUNCH} trainer.experiment_name=\"$NAME\"\n"
    with pytest.raises(VerlSourceError) as caught:
        convert(tmp_path, text)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'run.sh'}: trainer.experiment_name: $NAME")
    assert "bash's $'...' quoting" in message and "not read here" in message
    with pytest.raises(VerlSourceError, match=r"experiment_name: its value is written in bash"):
        convert(tmp_path, f"{LAUNCH} trainer.experiment_name=$'a\\tb'\n")


def test_ansi_c_quoting_the_command_does_not_use_costs_nothing(tmp_path):
    """`IFS=$'\\n\\t'`, an `echo`, and a launch before the last (whose keys are not
    converted) may hold it."""
    text = (
        f"set -euo pipefail\nIFS=$'\\n\\t'\necho $'done\\n'\n{LAUNCH} trainer.project_name=$'p'\n"
        f"{LAUNCH} trainer.experiment_name=e\n"
    )
    assert trainer_keys(tmp_path, text) == {"experiment_name": "e"}


def test_locale_quoting_is_plain_double_quoting(tmp_path):
    """`$"x"` is "x" (it was `$x`, another variable's reference)."""
    text = (
        'mymodel=/wrong\nLOC=$"mymodel"\n'
        f'{LAUNCH} trainer.experiment_name=$LOC trainer.project_name=$"p q"\n'
    )
    conversion = convert(tmp_path, text)
    assert conversion.tree["trainer"]["experiment_name"] == "mymodel"  # bash: mymodel
    assert conversion.tree["trainer"]["project_name"] == "p q"  # bash: p q


@pytest.mark.parametrize("escaped", ["\\$V", '"\\$V"'])
def test_an_escaped_dollar_is_no_reference(tmp_path, escaped):
    """`\\$V` and `"\\$V"` are a literal `$V` (they took V's value)."""
    conversion = convert(tmp_path, f"V=real\n{LAUNCH} trainer.experiment_name={escaped}\n")
    assert conversion.tree["trainer"]["experiment_name"] == "$V"  # bash: $V


def test_a_continuation_inside_a_word_joins_it_as_bash_does(tmp_path):
    """`ab\\<newline>cd` is `abcd` (it was `ab`, and `cd` a word of its own); a comment's
    trailing backslash continues nothing."""
    text = (
        f"{LAUNCH} \\\n  trainer.experiment_name=ab\\\ncd \\\n  trainer.project_name=p # c \\\n"
        "trainer.total_epochs=9\n"
    )
    conversion = convert(tmp_path, text)
    assert as_given(conversion)["trainer"] == {"experiment_name": "abcd", "project_name": "p"}


def test_a_line_break_in_quotes_is_refused(tmp_path):
    """Inside single quotes a backslash-newline is kept (bash: `x\\<newline>y`); it was read
    as `x y`."""
    with pytest.raises(VerlSourceError, match=r"project_name: its value holds a line break"):
        convert(tmp_path, f"{LAUNCH} trainer.project_name='x\\\ny'\n")
    with pytest.raises(VerlSourceError, match=r"project_name: \$N \(in its value\) holds a line"):
        convert(tmp_path, f'N="a\nb"\n{LAUNCH} trainer.project_name="$N"\n')


def test_a_here_doc_body_is_not_read_as_commands(tmp_path):
    """Its `MODEL=/old/model` line was an assignment (bash: /models/real)."""
    text = (
        "MODEL=/models/real\ncat > notes.txt <<EOF\nMODEL=/old/model\nEOF\n"
        "cat <<-'END' >> notes.txt\n\tMODEL=/older\n\tEND\n"
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=$MODEL"
        " data.max_prompt_length=$(( 1 << 4 ))\n"
    )
    assert as_given(convert(tmp_path, text))["model"] == {"path": "/models/real"}


def test_a_verl_command_inside_a_here_doc_is_named(tmp_path):
    text = (
        "sbatch <<EOF\n#!/bin/bash\npython3 -m verl.trainer.main_ppo trainer.total_epochs=5\nEOF\n"
    )
    with pytest.raises(VerlSourceError, match="the verl command is inside a here-doc"):
        convert(tmp_path, text)


@pytest.mark.parametrize(
    "lines, reference, expected",
    [
        ("EMPTY=", "${EMPTY:-/d}", "/d"),  # was the empty value
        ("EMPTY=", "${EMPTY-/d}", ""),
        ("", "${UNSET-/d}", "/d"),  # was left as written
        ("", "${UNSET:=/d}_$UNSET", "/d_/d"),
        (": ${MODEL:=/x}", "$MODEL", "/x"),
        ("SET=1", "${SET:+/alt}", "/alt"),
        ("", "${UNSET:+/alt}x", "x"),
        ("export A=/a B=b", "$A$B", "/ab"),  # were not set
        ("A=/a B=b", "$A$B", "/ab"),
        ("X=/a\nX+=b", "$X", "/ab"),  # was /a
        ("M=/old\ndeclare -r M=/new", "$M", "/new"),  # was /old
        ("readonly M=/r", "$M", "/r"),
        ("M=/old\nexport M", "$M", "/old"),
        ("M=/m\nM[1]=x", "$M", "/m"),  # an element beside: $M is element 0
    ],
)
def test_variables_are_set_and_expanded_as_bash_does(tmp_path, lines, reference, expected):
    text = f"{lines}\npython3 -m verl.trainer.main_ppo trainer.experiment_name=x{reference}\n"
    assert trainer_keys(tmp_path, text) == {"experiment_name": f"x{expected}"}


@pytest.mark.parametrize("lines", ["M=/m\ndeclare -i M=2*3"])
def test_a_variable_unset_or_made_unknown_stays_as_written(tmp_path, monkeypatch, lines):
    """`declare -i` (bash works the value out) left the old value in the config."""
    monkeypatch.delenv("M", raising=False)
    conversion = convert(tmp_path, f"{lines}\n{LAUNCH} trainer.experiment_name=x$M\n")
    assert conversion.tree["trainer"]["experiment_name"] == "x$M"
    assert conversion.incomplete == ["trainer.experiment_name=x$M"]


def test_a_variable_set_again_after_the_command_does_not_reach_it(tmp_path):
    text = f"N=4\n{LAUNCH} actor_rollout_ref.rollout.n=$N\nN=99\n"
    assert convert(tmp_path, text).tree["rollout"] == {"n": 4}  # bash: 4 (was 99)


@pytest.mark.parametrize(
    "text",
    [
        "((" * (1 << 17),
        "'" + "x\n" * (1 << 16),
        "<<E\n" * (1 << 16),
        "$'" + "\\'" * (1 << 17),
        "#\\\n" * (1 << 16),
    ],
)
def test_reading_lines_stays_linear(tmp_path, text):
    """An unclosed `((` looked for its `))` to the end of the line at each position."""
    started = time.monotonic()
    with pytest.raises(VerlSourceError):
        convert(tmp_path, text)
    assert time.monotonic() - started < 5
