"""`mfsdp config from-verl` reading a bash array to the `)` bash ends it at: not the `)` of
a `$((...))` or `$(...)` element (quoted or not, `ARGS+=(`, `declare -a`), nor one in
backquotes, `${...}` or quotes, nor an escaped `\\)`; and the words after that `)` read as
bash reads them (`A=(x) B=(y)`, an array over lines ended by `y) && python3 ...`). Was:
the first word ending in `)` ended the array, and every later element was lost, replaced
by verl's defaults "which the source does not set". The words are compared with those
bash itself passes to a stand-in for python (`bash_words`)."""

from __future__ import annotations

import pytest

from tests.trainer.test_verl_script_words_split_as_bash_splits_them import (
    bash_words,
    read_words,
)
from trainer.shell_variables import array_end
from trainer.verl_import import convert_verl

VERL = "python3 -m verl.trainer.main_ppo"
LR = "actor_rollout_ref.actor.optim.lr=2e-6"
BATCH = "data.train_batch_size"


@pytest.mark.parametrize(
    "text",
    [
        # verl's newer examples: one override a line, a sum among them
        f"G=8\nA=(\n  trainer.project_name=p\n  {BATCH}=$((G * 8))\n  {LR}\n"
        f'  trainer.total_epochs=2\n)\n{VERL} "${{A[@]}}"\n',
        f'A=(x.a=1)\nA+=({BATCH}=$((16*4)) {LR})\n{VERL} "${{A[@]}}"\n',
        f'N=8\ndeclare -a A=("{BATCH}=$(( N*8 ))" {LR})\n{VERL} "${{A[@]}}"\n',
        f'A=({BATCH}=$(( (1+1)*2 )) {LR})\n{VERL} "${{A[@]}}"\n',
        f'A=({BATCH}=$((2*(1+1))))\n{VERL} "${{A[@]}}" {LR}\n',
        f'A=(trainer.project_name="$((1+1))" {LR}\n)\n{VERL} "${{A[@]}}"\n',
        f'A=(trainer.project_name=${{X:-a)}} {LR})\n{VERL} "${{A[@]}}"\n',
        # quoted parentheses, comments and continuations inside
        f"A=( \"trainer.project_name=a)\" 'trainer.experiment_name=(b)' {LR} )\n"
        f'{VERL} "${{A[@]}}"\n',
        f'A=( x.a=1  # a note (with parentheses) y)\n  {LR} )\n{VERL} "${{A[@]}}"\n',
        f'A=( trainer.project_name=a\\) trainer.experiment_name=\\(b {LR} )\n{VERL} "${{A[@]}}"\n',
        f'A=( "trainer.project_name=${{X:-\\)}}" {LR} )\n{VERL} "${{A[@]}}"\n',
        f'A=( x.a=$((1+1)) \\\n  {LR} )\n{VERL} "${{A[@]}}"\n',
        # what follows the array's `)`
        f'A=(x.a=1\n {LR}) && {VERL} "${{A[@]}}"\n',
        f'A=(x.a=1\n {LR}) B=(trainer.total_epochs=$((1+1)))\n{VERL} "${{A[@]}}" "${{B[@]}}"\n',
        f'A=(x.a=1 {LR}) B=(trainer.total_epochs=2)\n{VERL} "${{A[@]}}" "${{B[@]}}"\n',
        # a function defined after the array's `)`: its body is read where it is called
        f'A=(x.a=1\n {LR}) && f() {{ {VERL} "${{A[@]}}" trainer.total_epochs=$E; }}\nE=3\nf\n',
        f"f() {{\n  local -a A=(trainer.total_epochs=$((1+1))\n    {LR})\n"
        f'  {VERL} "${{A[@]}}"\n}}\nf\n',
    ],
)
def test_the_array_holds_bashs_elements(tmp_path, text):
    words, refused = read_words(tmp_path, text)
    assert refused == ""
    assert words == bash_words(tmp_path, text)


@pytest.mark.parametrize("command", ["$(echo 64)", "`echo 64`"])
def test_a_command_output_element_keeps_the_elements_after_it(tmp_path, command):
    """A command's output is not run here: the element stays as written, to fill in, and
    the elements after it are kept."""
    text = f'A=({BATCH}={command} {LR} trainer.total_epochs=2)\n{VERL} "${{A[@]}}"\n'
    words, _refused = read_words(tmp_path, text)
    assert words == [f"{BATCH}={command}", LR, "trainer.total_epochs=2"]


@pytest.mark.parametrize(
    ("word", "end"),
    [
        ("b)", 1),
        (")", 0),
        ("x=$((1+2)))", 10),
        ("x=$((1+2))", None),
        ("x=$(echo a)", None),
        ("x=`echo )`", None),
        ("x=${A:-)}", None),
        ("x=\ue00b", None),  # a quoted `)`, as the line's reading marks it
    ],
)
def test_the_closing_paren_is_the_first_bare_one(word, end):
    assert array_end(word) == end


def test_the_converted_config_has_the_elements_after_a_sum(tmp_path):
    """The report's script: each later element was replaced by verl's default."""
    script = tmp_path / "run.sh"
    script.write_text(
        "GPUS=8\nARGS=(\n  algorithm.adv_estimator=grpo\n  data.train_files=/d/a.parquet\n"
        f"  actor_rollout_ref.model.path=/m/q\n  {BATCH}=$((GPUS * 8))\n"
        f"  actor_rollout_ref.actor.ppo_mini_batch_size=16\n  {LR}\n"
        "  actor_rollout_ref.rollout.n=8\n  actor_rollout_ref.actor.use_kl_loss=True\n)\n"
        f'{VERL} "${{ARGS[@]}}"\n'
    )
    conversion = convert_verl(script)
    tree = conversion.tree
    assert conversion.dropped == []
    assert tree["data"]["train_batch_size"] == 64
    assert tree["actor"]["ppo_mini_batch_size"] == 16
    assert tree["optim"]["lr"] == 2e-6
    assert tree["rollout"]["n"] == 8
    assert tree["actor"]["use_kl_loss"] is True
