"""`mfsdp config from-verl` giving verl the words bash gives it, or listing what it does not
read (exit 1), never dropping it at exit 0: brace expansion (`lr={1e-6,2e-6}` is two words,
Hydra keeps the last), array element assignments, `declare -a`, slices and elements of an
array, a plain assignment to an array (its element 0), `set -- ...` then `"$@"`, the tilde
prefix (`D=~/ckpt`, `${X:-~/ckpt}`: HOME's path), and quoted text in the word of an
unquoted `${N:-"run 1"}` (one word). Where bash's words are known, they are compared with
those bash itself passes to a stand-in for python (`bash_words`)."""

from __future__ import annotations

import pytest

from tests.trainer.test_verl_script_words_split_as_bash_splits_them import (
    bash_words,
    read_words,
)
from trainer import shell_braces
from trainer.verl_import import convert_verl
from trainer.verl_script_reader import read_script

VERL = "python3 -m verl.trainer.main_ppo"
LR = "actor_rollout_ref.actor.optim.lr"
HEAD = f"{VERL} algorithm.adv_estimator=grpo data.train_files=/d/t.parquet"


@pytest.mark.parametrize(
    "text",
    [
        f"{VERL} {LR}={{1e-6,2e-6}}\n",  # was a YAML mapping, and no lr at all
        f"{VERL} data.train_files=/d/{{train,test}}.parquet trainer.logger={{console,wandb}}\n",
        f"{VERL} trainer.total_epochs={{1..3}} trainer.save_freq={{10..1..4}}\n",
        f"{VERL} trainer.experiment_name=r{{01..03}} trainer.project_name=p{{a..c}}\n",
        f"{VERL} trainer.project_name=a{{b,{{c,d}}}}e trainer.experiment_name={{x,y}}{{1,2}}\n",
        f"{VERL} trainer.project_name=a{{,b}} trainer.experiment_name=a{{x}}b{{}}\n",
        # quoted or escaped braces and commas, and those of expansions, are none
        f"{VERL} trainer.project_name='{{a,b}}' trainer.experiment_name=\\{{a,b}}\n",
        f'{VERL} trainer.project_name="x{{a,b}}" trainer.experiment_name=a{{b\\,c}}\n',
        f"N=n\n{VERL} trainer.project_name=${{N}}{{1,2}} trainer.experiment_name=${{M:-{{a}}}}\n",
        # an assignment is not expanded, an argument written as one is; arrays' elements are
        f"X={{1,2}}\nexport Y={{3,4}}\n{VERL} trainer.project_name=$X trainer.experiment_name=$Y\n",
        f'A=({LR}={{1e-6,3e-6}}\n  trainer.total_epochs={{1..2}})\n{VERL} "${{A[@]}}"\n',
        f'A=(trainer.project_name=p{{a,b}})\n{VERL} "${{A[@]}}"\n',
    ],
)
def test_brace_expansion_gives_bashs_words(tmp_path, text):
    words, refused = read_words(tmp_path, text)
    assert refused == ""
    assert words == bash_words(tmp_path, text)


def test_brace_expansion_keeps_the_last_value_as_hydra_does(tmp_path):
    """verl trains with lr 2e-6 and reads /d/test.parquet; the config had neither."""
    script = tmp_path / "run.sh"
    script.write_text(
        f"{VERL} algorithm.adv_estimator=grpo data.train_files=/d/{{train,test}}.parquet"
        f" actor_rollout_ref.model.path=/m/q {LR}={{1e-6,2e-6}}\n"
    )
    conversion = convert_verl(script)
    assert conversion.tree["data"]["train_files"] == ["/d/test.parquet"]
    assert conversion.tree["optim"]["lr"] == 2e-6


def test_a_brace_expansion_too_large_is_refused_naming_it():
    with pytest.raises(shell_braces.TooManyWords, match=r"\{1\.\.100000\}"):
        shell_braces.expanded_words("k={1..100000}")


@pytest.mark.parametrize(
    "text",
    [
        # element assignments, at an index in the array or one past its end
        f'A=(trainer.project_name=x {LR}=2e-6)\nA[0]=trainer.project_name=y\n{VERL} "${{A[@]}}"\n',
        f'A=(trainer.project_name=x)\nA[1]={LR}=2e-6\nA[-1]+=5\n{VERL} "${{A[@]}}"\n',
        f'A=(trainer.project_name=x)\nA+=({LR}=2e-6)\n{VERL} "${{A[@]}}"\n',
        f'declare -a A=(trainer.project_name=x {LR}=2e-6)\n{VERL} "${{A[@]}}"\n',
        f'f() {{ local -a A=(trainer.project_name=f); {VERL} "${{A[@]}}"; }}\nf\n',
        # slices and elements
        f'A=({LR}=2e-6 trainer.project_name=x)\n{VERL} "${{A[@]:1}}"\n',
        f"A=(trainer.project_name=x {LR}=2e-6 trainer.total_epochs=2)\n"
        f'{VERL} "${{A[@]:0:1}}" ${{A[1]}} "${{A[@]: -1}}" "${{A[@]:$((0+1)):1}}"\n',
        # a plain assignment to an array sets its element 0; `$A` is element 0
        f'A=({LR}=2e-6 trainer.total_epochs=2)\nA=trainer.project_name=z\n{VERL} "${{A[@]}}"\n',
        f"A=(trainer.project_name=z {LR}=2e-6)\n{VERL} $A\n",
        f'M=trainer.project_name=m\nM[1]=trainer.total_epochs=3\n{VERL} "${{M[@]}}"\n',
        # `set -- ...` then `"$@"`; options alone set none
        f'set -- {LR}=2e-6 trainer.project_name=s\n{VERL} "$@"\n',
        f'set -euo pipefail -- {LR}=2e-6\nset -x\n{VERL} "$@"\n',
        f'set -- a {LR}=2e-6\nshift\n{VERL} "$@" trainer.project_name=x$1\n',
        # in a function's call, its own parameters: the script's stand again after it
        f'set -- {LR}=2e-6\nf() {{ set -- trainer.project_name=f; }}\nf x\n{VERL} "$@"\n',
    ],
)
def test_array_and_positional_forms_give_bashs_words(tmp_path, text):
    words, refused = read_words(tmp_path, text)
    assert refused == ""
    assert words == bash_words(tmp_path, text)


@pytest.mark.parametrize(
    "lines",
    [
        'if [ -n "$X" ]; then set -- trainer.project_name=b; fi',
        '[ -n "$X" ] && set -- trainer.project_name=b',
    ],
)
def test_set_in_a_block_that_may_not_run_leaves_the_arguments_unknown(tmp_path, lines):
    """bash may or may not run it: `"$@"` is `trainer.project_name=a` or the block's words,
    known only as it runs, so it is listed to add."""
    text = f'set -- trainer.project_name=a\n{lines}\n{VERL} "$@" trainer.project_name=${{1}}\n'
    launch, _launches, _variables = read_script(text, tmp_path / "run.sh")
    assert launch.texts == [("trainer.project_name", "${1}")]
    assert [item.split(": ")[0] for item in launch.incomplete] == ["$@"]


@pytest.mark.parametrize(
    "lines, written",
    [
        ("A=(trainer.project_name=x)\nA[$RANDOM]=y", "${A[@]}"),  # an index not known here
        ("A=(trainer.project_name=x)\nA[5]=y", "${A[@]}"),  # past its end: indexes not kept
        ("declare -ag A=(trainer.project_name=x)", "${A[@]}"),  # options not read here
        ("read -a A\nA[0]=trainer.project_name=y", "${A[@]}"),
        ("A=(trainer.project_name=x)\nunset 'A[0]'\nA+=(b)", "${A[@]:1}"),  # sparse
        ("A=(trainer.project_name=x)", "${A[@]:1:-1}"),  # bash stops: a length below 0
    ],
)
def test_an_array_not_read_here_is_listed_to_add(tmp_path, lines, written):
    """Such arrays' keys went with a note only, at exit 0: the config trained with mfsdp's
    defaults for them (a lost learning rate became mfsdp's)."""
    text = f'{lines}\n{VERL} "{written}" trainer.total_epochs=2\n'
    launch, _launches, _variables = read_script(text, tmp_path / "run.sh")
    assert launch.texts == [("trainer.total_epochs", "2")]
    assert [item.split(": ")[0] for item in launch.incomplete] == [written]


@pytest.mark.parametrize(
    "lines, value",
    [
        ("D=~/ckpt", "$D"),
        ("D=/x:~/ckpt", "$D"),
        ("export CK=~/ckpt", "$CK"),
        ("", "${CK:-~/ckpt}"),
        ("", "${CK-~}"),
        ("HOME=/script/home\nD=~/ckpt", "$D"),
    ],
)
def test_a_tilde_prefix_is_homes_path(tmp_path, monkeypatch, lines, value):
    """bash expands `~` in an assignment and in the word of an unquoted `${X:-~/x}`; verl
    receives the home's path. It was refused as a `~` Hydra refuses."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    text = f"{lines}\n{HEAD} actor_rollout_ref.model.path=/m/q trainer.default_local_dir={value}\n"
    (expected,) = [word for word in bash_words(tmp_path, text) if "local_dir" in word]
    script = tmp_path / "run.sh"
    script.write_text(text)
    conversion = convert_verl(script)
    assert f"trainer.default_local_dir={conversion.tree['trainer']['run_dir']}" == expected


@pytest.mark.parametrize(
    "text",
    [
        f"{VERL} trainer.default_local_dir=a.b=~/x trainer.project_name=~user\n",
        f'{VERL} trainer.project_name="~/x" trainer.experiment_name="${{N:-~/x}}"\n',
    ],
)
def test_a_tilde_bash_does_not_expand_stays(tmp_path, text):
    words, _refused = read_words(tmp_path, text)
    assert words == bash_words(tmp_path, text)


@pytest.mark.parametrize(
    "text",
    [
        f'{VERL} trainer.experiment_name=${{N:-"run 1"}} trainer.project_name=p\n',
        f"{VERL} trainer.experiment_name=${{N:-'run 1'}}x trainer.project_name=p\n",
        f'D="run 1"\n{VERL} trainer.experiment_name=${{N:-"$D"}} trainer.project_name=p\n',
        f'IFS=,\n{VERL} trainer.experiment_name=${{N:-"a,b"}} trainer.project_name=p\n',
        f'{VERL} trainer.experiment_name="${{N:-a #b}}" trainer.project_name=p\n',
        # stored in a variable, the value is split as any is
        f'IFS=,\nX=${{N:-"trainer.project_name=a,trainer.total_epochs=2"}}\n{VERL} $X\n',
    ],
)
def test_quoted_text_in_an_unquoted_default_is_one_word(tmp_path, text):
    """bash does not split text quoted inside `${N:-...}`: `${N:-"run 1"}` was refused as
    passing `1` as a word of its own."""
    words, refused = read_words(tmp_path, text)
    assert refused == ""
    assert words == bash_words(tmp_path, text)
