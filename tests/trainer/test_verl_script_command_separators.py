"""`mfsdp config from-verl` splits a line of a launch script into its commands as bash does:
shlex knows no `;`, so `MODEL=/m/Qwen; echo hi` put `/m/Qwen;` into model.path at exit 0, and
`cd /x&&MODEL=/m` (no spaces) was one word that the guarded reading of `&&` never saw. What
bash itself sets is the expected value here: each script's lines are run by bash, with the
verl command left out."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.verl_conversions import as_given
from trainer.shell_quoting import COMMAND_END, mark
from trainer.verl_import import convert_verl
from trainer.verl_source import VerlSourceError

LAUNCH = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
USE = f"{LAUNCH} actor_rollout_ref.model.path=$MODEL\n"
OUTSIDE = "MODEL=/models/big\n"

# lines bash runs in the script's own shell: what they set is what the command gets
SURELY_RUN = {
    "then-echo": "MODEL=/m/Qwen; echo hi\n",
    "two-assignments": "A=1; MODEL=/models/x$A\n",
    "no-spaces": "MODEL=/m/a;MODEL=/m/b\n",
    "after-a-command": "cd /; MODEL=/m/b\n",
    "after-a-redirection": "echo hi 2>&1; MODEL=/m/b\n",
    "after-an-and-list": "true && MODEL=/m/a; MODEL=/m/b\n",
    "after-a-one-line-if": "if false; then MODEL=/m/a; fi; MODEL=/m/b\n",
    "after-a-parenthesis-in-a-default": "X=${UNSET:-(x}; MODEL=/m/b; echo\n",
    "after-a-substitution-in-a-default": "X=${UNSET:-$(echo a)}; MODEL=/m/b; echo\n",
    "in-a-comment": "MODEL=/m/a # MODEL=/m/b; MODEL=/m/c\n",
    "in-arithmetic-for": "for ((i=0; i<2; i++)); do :; done; MODEL=/m/b\n",
    "case-arm-of-a-known-word": "case x in x) MODEL=/m/a;; y) MODEL=/m/c;;& esac\n",
}

# lines that put a `;` into the value (not a command separator there): verl gets `/m/a;b`,
# which Hydra refuses outside its own quotes
SEMICOLON_IN_VALUE = {
    "double-quoted": 'MODEL="/m/a;b"\n',
    "single-quoted": "MODEL='/m/a;b'\n",
    "escaped": "MODEL=/m/a\\;b\n",
    "in-a-default": "MODEL=${UNSET:-/m/a;b}\n",
}

# lines where what sets MODEL may not run in the script's shell: the value outside stands
MAYBE_RUN = {
    "case-arm-of-an-unknown-word": "case $UNSET_MODE in x) MODEL=/m/a;; y) MODEL=/m/c;;& esac\n",
    "and-without-spaces": "cd /&&MODEL=/m/a\n",
    "or-without-spaces": "true||MODEL=/m/a\n",
    "pipe-without-spaces": "MODEL=/m/a|cat\n",
    "background": "MODEL=/m/a& wait\n",
    "subshell": "(cd /; MODEL=/m/a); echo\n",
    "arithmetic-for-body": "for ((i=0; i<0; i++)); do MODEL=/m/a; done\n",
}


def bash_value(lines: str) -> str:
    """$MODEL as bash leaves it after `lines` (their own output discarded)."""
    script = f'exec 3>&1 >/dev/null 2>&1\n{lines}printf %s "$MODEL" >&3\n'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def convert(tmp_path, text: str):
    script = tmp_path / "run.sh"
    script.write_text(text)
    return convert_verl(script)


@pytest.mark.parametrize("lines", list(SURELY_RUN.values()), ids=list(SURELY_RUN))
def test_each_command_of_a_line_sets_what_bash_sets(tmp_path, lines):
    conversion = convert(tmp_path, OUTSIDE + lines + USE)
    assert as_given(conversion)["model"]["path"] == bash_value(OUTSIDE + lines)
    assert conversion.incomplete == []


@pytest.mark.parametrize("lines", list(SEMICOLON_IN_VALUE.values()), ids=list(SEMICOLON_IN_VALUE))
def test_a_semicolon_bash_keeps_in_the_value_reaches_hydra_which_refuses_it(tmp_path, lines):
    assert bash_value(OUTSIDE + lines) == "/m/a;b"
    with pytest.raises(VerlSourceError, match="refuses ';'"):
        convert(tmp_path, OUTSIDE + lines + USE)


@pytest.mark.parametrize("lines", list(MAYBE_RUN.values()), ids=list(MAYBE_RUN))
def test_a_command_that_may_not_run_here_keeps_the_value_outside(tmp_path, lines):
    conversion = convert(tmp_path, OUTSIDE + lines + USE)
    assert as_given(conversion)["model"]["path"] == "/models/big"
    assert conversion.incomplete == ["actor_rollout_ref.model.path=/models/big"]


def test_a_command_after_the_verl_command_is_not_its_argument(tmp_path):
    """bash passes `path=/m/Qwen` and runs `echo done` after: the `;` is no part of it."""
    conversion = convert(tmp_path, "MODEL=/m/Qwen\n" + USE.rstrip("\n") + "; echo done\n")
    assert as_given(conversion)["model"]["path"] == bash_value("MODEL=/m/Qwen\n")


def test_the_last_of_two_verl_commands_on_a_line_is_converted(tmp_path):
    text = f"{LAUNCH} trainer.seed=5; {LAUNCH} trainer.seed=7\n"
    conversion = convert(tmp_path, text)
    assert conversion.tree["trainer"]["seed"] == 7
    assert any("starts verl 2 times" in note for note in conversion.notes)


@pytest.mark.parametrize(
    "line",
    ["X=$(echo a; echo b)", "X=`echo a; echo b`", "X=$(( (1 + 2) ))", "echo '$A;' \"b;c\" d\\;e"],
)
def test_no_command_ends_inside_substitutions_quotes_or_escapes(line):
    assert COMMAND_END not in mark(line)


@pytest.mark.parametrize("operator", ["&&", "||", "|", "|&", "&", " && ", " | "])
def test_the_verl_commands_arguments_end_at_a_list_or_pipe_operator(tmp_path, operator):
    """What follows `&&`, `||`, `|` or `&` is another program's command line: verl's
    generation step after training names `model.path` too, and it was taken as the launch's."""
    text = (
        f"{LAUNCH} actor_rollout_ref.model.path=/m/policy trainer.total_epochs=2{operator}"
        "python3 -m verl.trainer.main_generation model.path=/m/other data.n_samples=4\n"
    )
    conversion = convert(tmp_path, text)
    assert (conversion.tree["model"]["path"], conversion.tree["trainer"]["epochs"]) == (
        "/m/policy",
        2,
    )
    assert conversion.dropped == []


def test_a_tee_and_an_echo_after_the_verl_command_are_not_its_arguments(tmp_path):
    conversion = convert(tmp_path, f"{LAUNCH} trainer.seed=5 2>&1 | tee log && echo status=ok\n")
    assert conversion.tree["trainer"]["seed"] == 5
    assert conversion.dropped == []


def test_two_verl_commands_joined_by_an_and_list_count_as_two(tmp_path):
    conversion = convert(tmp_path, f"{LAUNCH} trainer.seed=5 && {LAUNCH} trainer.seed=7\n")
    assert conversion.tree["trainer"]["seed"] == 7
    assert any("starts verl 2 times" in note for note in conversion.notes)
