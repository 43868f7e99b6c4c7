"""`mfsdp config from-verl` passing verl the words bash passes it: an unquoted expansion is
split at blanks (`M="/m/a b"` then `model.path=$M` passes `model.path=/m/a` and `b`, which
Hydra refuses; `$ARGS` holding two overrides passes both, and was dropped), a quoted one is
one word; a `#` inside `${...}` starts no comment; `unset 'A[0]'` removes that element. The
words are compared with those bash itself passes to a stand-in for python."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from trainer.verl_import import convert_verl
from trainer.verl_script_reader import read_script
from trainer.verl_source import VerlSourceError

VERL = "python3 -m verl.trainer.main_ppo"


def bash_words(tmp_path: Path, text: str) -> list[str]:
    """The words bash passes to the verl command of `text` (a stand-in prints them)."""
    stand_in = "python3() { shift 2; printf '%s\\n' \"$@\" >&3; }\nexec 3>&1 >/dev/null\n"
    done = subprocess.run(
        ["bash", "-c", stand_in + text], capture_output=True, text=True, timeout=30, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def read_words(tmp_path: Path, text: str) -> tuple[list[str], str]:
    """The `key=value` words read from `text`'s verl command, and why it is refused ("")."""
    launch, _launches, _variables = read_script(text, tmp_path / "run.sh")
    assert launch is not None
    return [f"{key}={value}" for key, value in launch.texts], launch.refused


@pytest.mark.parametrize(
    "text",
    [
        'ARGS="trainer.total_epochs=2 trainer.save_freq=5"\n{VERL} $ARGS\n',
        'ARGS="  trainer.total_epochs=2\ttrainer.save_freq=5 "\n{VERL} x.y=1 $ARGS x.z=2\n',
        'A="trainer.total_epochs="; B="2 trainer.save_freq=5"\n{VERL} $A$B\n',
        "ONE=trainer.total_epochs=2\n{VERL} $ONE\n",
        'E=""\n{VERL} $E trainer.total_epochs=2 ${E}\n',
        'M="/m/a b"\n{VERL} "actor_rollout_ref.model.path=$M" trainer.project_name="$M"\n',
        'M="/m/a b"\n{VERL} actor_rollout_ref.model.path="$M"x\n',
        'P="a b"\n{VERL} "trainer.project_name=\'${1:-$P}\'"\n',
        "{VERL} trainer.project_name=${1:-a}\n",
        # verl's own examples: overrides over lines in quotes, continued, spread unquoted
        'CFG="\n    trainer.total_epochs=2 \\\n    trainer.save_freq=5\n    trainer.test_freq=3"\n'
        "{VERL} $CFG\n",
        'CFG="trainer.total_epochs=$(( (1 + 1) * 2 )) trainer.save_freq=5"\n{VERL} $CFG\n',
    ],
)
def test_the_words_verl_gets_are_bashs(tmp_path, text):
    text = text.replace("{VERL}", VERL)
    words, refused = read_words(tmp_path, text)
    assert refused == ""
    assert words == bash_words(tmp_path, text)


@pytest.mark.parametrize(
    "text",
    [
        'M="/m/a b"\n{VERL} actor_rollout_ref.model.path=$M\n',
        'M="/m/a b"\n{VERL} actor_rollout_ref.model.path=${M}\n',
        'M="/m/a\tb"\n{VERL} actor_rollout_ref.model.path=${1:-$M}\n',
        'N="a\nb"\n{VERL} trainer.project_name=$N\n',
        'CN="ppo_trainer extra"\n{VERL} --config-name $CN trainer.total_epochs=2\n',
        'CN="ppo_trainer extra"\n{VERL} --config-name=$CN trainer.total_epochs=2\n',
    ],
)
def test_a_word_bash_splits_off_without_an_equals_sign_is_refused(tmp_path, text):
    """Hydra refuses an override without `=`: verl never starts, so neither does the
    conversion (the config held the blank as one value)."""
    text = text.replace("{VERL}", VERL)
    bare = [word for word in bash_words(tmp_path, text) if "=" not in word and word[:1] != "-"]
    assert bare[-1:] in (["b"], ["extra"])
    _words, refused = read_words(tmp_path, text)
    assert f"passes {bare[-1]!r} to verl" in refused
    script = tmp_path / "run.sh"
    script.write_text(text)
    with pytest.raises(VerlSourceError, match=r"run\.sh: .*bash splits the unquoted value"):
        convert_verl(script)


def test_overrides_in_an_unquoted_variable_are_converted(tmp_path):
    """`$ARGS` holding `a=1 b=2` was no word with an `=`: its overrides were dropped."""
    script = tmp_path / "run.sh"
    script.write_text(f'ARGS="trainer.total_epochs=2 data.train_batch_size=8"\n{VERL} $ARGS\n')
    tree = convert_verl(script).tree
    assert (tree["trainer"]["epochs"], tree["data"]["train_batch_size"]) == (2, 8)


@pytest.mark.parametrize(
    "assignment", ["M=${1:-a #b}", "M=${1:-'a #b'}", 'M=${1:-"a #b"}x', "M=${1:-a}#b"]
)
def test_a_hash_inside_a_parameter_expansion_starts_no_comment(tmp_path, assignment):
    text = f"{assignment}\n{VERL} \"trainer.project_name='$M'\" trainer.total_epochs=2\n"
    words, refused = read_words(tmp_path, text)
    assert refused == ""
    assert words == bash_words(tmp_path, text)


@pytest.mark.parametrize(
    "unset",
    [
        "unset 'A[0]'",
        "unset A[1]",
        'unset "A[-1]"',
        "i=1; unset 'A[i]'",
        "unset 'A[7]'",
        "unset 'A[@]'",
    ],
)
def test_an_unset_array_element_is_gone_from_the_array(tmp_path, unset):
    text = (
        "A=(trainer.total_epochs=2 trainer.save_freq=5 trainer.project_name=p)\n"
        f'{unset}\n{VERL} "${{A[@]}}" trainer.test_freq=3\n'
    )
    words, _refused = read_words(tmp_path, text)
    assert words == bash_words(tmp_path, text)


def test_an_unset_of_element_zero_of_a_plain_variable_unsets_it(tmp_path):
    text = f"M=/m/a\nunset 'M[0]'\n{VERL} actor_rollout_ref.model.path=${{M-/m/unset}}\n"
    words, _refused = read_words(tmp_path, text)
    assert words == bash_words(tmp_path, text) == ["actor_rollout_ref.model.path=/m/unset"]


@pytest.mark.parametrize("unset", ["unset -v 'A[0]' 'A[0]'", "unset 'A[$1]'"])
def test_an_element_whose_index_is_not_known_here_leaves_the_array_named(tmp_path, unset):
    """After an element before the last is unset, bash keeps the indexes of the others
    (the second `A[0]` is gone already): not kept here, the array is named, not spread."""
    text = f'A=(trainer.total_epochs=2 trainer.save_freq=5)\n{unset}\n{VERL} "${{A[@]}}"\n'
    launch, _launches, _variables = read_script(text, tmp_path / "run.sh")
    assert launch.texts == []
    assert any(
        item.startswith("${A[@]}: set by `unset` of the element") for item in launch.incomplete
    )


def test_a_reference_left_as_written_is_not_split(tmp_path):
    """`${1:?need a model}` with no argument stops bash; left as written (and flagged), its
    message's blanks split no word."""
    text = f"MODEL=${{1:?need a model}}\n{VERL} actor_rollout_ref.model.path=$MODEL\n"
    assert read_words(tmp_path, text) == (["actor_rollout_ref.model.path=${1:?need a model}"], "")
