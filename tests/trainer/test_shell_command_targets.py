"""Which variables a command's words set is read from the words alone
(trainer/shell_command_targets.py), with no `Variables` and without importing
`trainer.shell_variables`, which builds on it."""

import subprocess
import sys

import pytest

from trainer import shell_command_targets as targets


def test_it_loads_without_the_variables_module():
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, trainer.shell_command_targets;"
            "print('trainer.shell_variables' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "False"


@pytest.mark.parametrize(
    "words, expected",
    [
        (["for", "lr", "in", "1e-6", "2e-6"], [("lr", "a `for` loop")]),
        (["IFS=,", "read", "-r", "A", "B"], [("A", "`read`"), ("B", "`read`")]),
        (["read", "-r"], [("REPLY", "`read`")]),
        (["printf", "-v", "OUT", "%s", "x"], [("OUT", "`printf -v`")]),
        (["((", "N++", "))"], [("N", "`(( ))`")]),
        (["echo", "$((M = 8))"], [("M", "`$(( ))`")]),
        (["echo", "MODEL=/m"], []),
    ],
)
def test_unknowable_targets(words, expected):
    assert targets.unknowable_targets(words) == expected


def test_names_set_leaves_out_a_command_prefix():
    assert targets.names_set(["IFS=,", "read", "-r", "A"]) == []
    assert targets.names_set(["A=1", "B=x", "&&", "unset", "C", "D[0]"]) == ["A", "B", "C", "D"]


@pytest.mark.parametrize(
    "words, expected",
    [
        (["source", "env.sh"], "source env.sh"),
        (["builtin", ".", "env.sh"], ". env.sh"),
        (["export", "$(cat .env)"], "export $(cat .env)"),
        (["printf", "-v", "$VAR", "%s", "x"], "printf -v $VAR"),
        (["source", "venv/bin/activate"], ""),
        (["export", "MODEL=/m"], ""),
    ],
)
def test_opaque_command(words, expected):
    assert targets.opaque_command(words, {}) == expected


def test_readonly_unset_and_set():
    assert targets.made_readonly(["declare", "-r", "MODEL=/m"]) == ["MODEL"]
    assert targets.made_readonly(["readonly", "-f", "f"]) == []
    assert targets.unset_names(["-v", "A", "B"]) == ["A", "B"]
    assert targets.unset_names(["-f", "f"]) == []
    assert targets.unset_elements(["A[0]"]) == [("A", "0")]
    assert targets.set_arguments(["-euo", "pipefail"]) is None
    assert targets.set_arguments(["--", "a", "b"]) == ["a", "b"]
    assert targets.set_commands(["set", "-e", "&&", "echo", "x"]) == [["set", "-e"]]


def test_names_used():
    assert targets.names_used("${A:-x} $B ${C[@]} $((D + 1))") == ["A", "B", "C", "D"]


@pytest.mark.parametrize(
    "words, expected",
    [
        (["A=1", "B[2]=x"], ["A", "B"]),  # bash sets A for the rest of the script
        (["B[2]=x", "A=1"], ["B", "A"]),
        (["A=1", "env"], []),  # for `env` alone
    ],
)
def test_an_element_assignment_is_no_command_name(words, expected):
    assert targets.names_set(words) == expected
