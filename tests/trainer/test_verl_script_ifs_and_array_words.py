"""`mfsdp config from-verl` passing verl the words bash passes it where they turn on IFS or
on how an array or the arguments are spread: `IFS=$'\\n\\t'` (the usual strict mode) is read
(not read, `$ARGS` holding overrides was dropped at exit 0), `IFS=,` keeps the empty field
of `a,,b`, an unquoted `${A[@]}` splits each element, a quoted `"${A[*]}"` or `"$*"` is one
word joined by IFS's first character, and an IFS known only as the script runs refuses the
conversion. The words are compared with those bash itself passes to a stand-in for python."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from tests.trainer.test_verl_script_words_split_as_bash_splits_them import (
    VERL,
    bash_words,
    read_words,
)
from trainer import shell_quoting
from trainer.verl_import import convert_verl
from trainer.verl_script_reader import read_script
from trainer.verl_source import VerlSourceError


@pytest.mark.parametrize(
    "text",
    [
        "IFS=$'\\n\\t'\nARGS=\"trainer.total_epochs=2\ntrainer.save_freq=5\"\n{VERL} $ARGS\n",
        "IFS=$'\\n'\nARGS=\"trainer.project_name=a b\ntrainer.save_freq=5\"\n{VERL} $ARGS\n",
        "IFS=$'\\x2c'\nARGS=trainer.total_epochs=2,trainer.save_freq=5\n{VERL} $ARGS\n",
        "IFS=$'\\054 '\nARGS='trainer.total_epochs=2 , trainer.save_freq=5'\n{VERL} $ARGS\n",
        "IFS=\nARGS='trainer.project_name=a b'\n{VERL} $ARGS\n",
        "IFS=,\nunset IFS\nARGS='trainer.total_epochs=2 trainer.save_freq=5'\n{VERL} $ARGS\n",
        "while IFS=, read -r a b; do :; done < /dev/null\n"
        "ARGS='trainer.total_epochs=2 trainer.save_freq=5'\n{VERL} $ARGS\n",
        "A=(trainer.total_epochs=2 'trainer.save_freq=5 ')\n{VERL} ${A[@]} ${A[*]}\n",
        "A=('trainer.project_name=a b' trainer.save_freq=5)\n{VERL} \"${A[@]}\"\n",
        'A=(trainer.total_epochs=2)\nIFS=,\n{VERL} "${A[*]}"\n',
        "f() { {VERL} $@ \"$*\"; }\nf 'trainer.total_epochs=2 ' \n",
        "f() { {VERL} \"$@\"; }\nf 'trainer.project_name=a b' trainer.save_freq=5\n",
    ],
)
def test_the_words_verl_gets_under_ifs_and_spreads_are_bashs(tmp_path, text):
    text = text.replace("{VERL}", VERL)
    words, refused = read_words(tmp_path, text)
    assert refused == ""
    assert words == bash_words(tmp_path, text)


@pytest.mark.parametrize(
    "text",
    [
        "IFS=$'\\n'\nARGS='trainer.total_epochs=2 trainer.save_freq=5'\n{VERL} $ARGS\n",
        "IFS=,\nARGS=trainer.total_epochs=2,,trainer.save_freq=5\n{VERL} $ARGS\n",
        "IFS=,\nARGS=,trainer.total_epochs=2\n{VERL} $ARGS\n",
        "A=('trainer.project_name=a b' trainer.save_freq=5)\n{VERL} ${A[@]}\n",
        'A=(trainer.total_epochs=2 trainer.save_freq=5)\n{VERL} "${A[*]}"\n',
        'f() { {VERL} "$*"; }\nf trainer.total_epochs=2 trainer.save_freq=5\n',
        "f() { {VERL} $*; }\nf 'trainer.project_name=a b'\n",
    ],
)
def test_a_word_hydra_refuses_as_bash_passes_it_is_refused(tmp_path, text):
    """bash passes an empty word, a word without `=` or one override whose value holds
    another's `=`: Hydra refuses each and verl never starts (the conversion exited 0)."""
    text = text.replace("{VERL}", VERL)
    refusable = [
        word
        for word in bash_words(tmp_path, text)
        if "=" not in word or (" " in word.partition("=")[2] and "=" in word.partition("=")[2])
    ]
    assert refusable
    _words, refused = read_words(tmp_path, text)
    assert refused.startswith(f"{tmp_path / 'run.sh'}: ")
    script = tmp_path / "run.sh"
    script.write_text(text)
    with pytest.raises(VerlSourceError, match=r"run\.sh: .*(IFS|'=' Hydra refuses)"):
        convert_verl(script)


@pytest.mark.parametrize("setting", ["read -r IFS < /dev/null", 'if [ -n "$1" ]; then IFS=,; fi'])
def test_an_ifs_known_only_as_the_script_runs_refuses_an_unquoted_value(tmp_path, setting):
    """Which words bash splits `$ARGS` into turns on IFS: not known here, the words are not
    (read as one, the overrides were dropped at exit 0)."""
    script = tmp_path / "run.sh"
    script.write_text(
        f"{setting}\nARGS='trainer.total_epochs=2 trainer.save_freq=5'\n{VERL} $ARGS\n"
    )
    with pytest.raises(VerlSourceError, match=r"run\.sh: \$ARGS: .*IFS, which the script sets"):
        convert_verl(script)


@pytest.mark.parametrize("setting", ["", "read -r EXTRA < /dev/null\n"])
def test_a_value_left_as_written_passed_as_overrides_is_named(tmp_path, setting):
    """`$EXTRA` not set by the script, or set as it runs, passes overrides not read here:
    it was dropped without a word."""
    text = f"{setting}{VERL} trainer.total_epochs=2 $EXTRA\n"
    launch, _launches, _variables = read_script(text, tmp_path / "run.sh")
    assert launch is not None and launch.refused == ""
    assert any(note.startswith("$EXTRA: a value known only when") for note in launch.notes)


@pytest.mark.parametrize(
    "quoted",
    ["$'\\n\\t'", "$'a\\x41\\101\\cA\\e\\\\\\''", "$'\\u00e9\\U0001F600'", "$'ab\\0cd'", "$''"],
)
def test_an_ansi_c_string_decodes_as_bash_decodes_it(quoted):
    done = subprocess.run(
        ["bash", "-c", f"printf %s {quoted}"], capture_output=True, timeout=30, check=True
    )
    (word,) = shlex.split(shell_quoting.mark(f"X={quoted}"))
    assert shell_quoting.ansi_c_decoded(word) == "X=" + done.stdout.decode()
