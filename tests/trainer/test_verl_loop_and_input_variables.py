"""`mfsdp config from-verl` on variables a script sets to values only the running script
knows: a `for`/`select` loop's name, `read`, `mapfile`/`readarray`, `printf -v` and
`getopts` targets. None was noticed: a `for lr in 1e-6 2e-6` sweep around the verl command
converted with the `lr` set before the loop, at exit 0. Each such reference now stays as
written, is named with what sets it, and is left to the user (exit 1). A setter inside a block
that may not run (an uncalled function, an `if` branch, after `&&`) keeps the value set
before it, flagged to check, as an assignment there does: it erased that value
(`model.path: $MODEL` from a `read` no one calls)."""

from __future__ import annotations

import pytest

from tests.support.verl_conversions import as_given
from trainer.verl_import import convert_verl

LAUNCH = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
USE = f"{LAUNCH} actor_rollout_ref.model.path=$MODEL\n"
OUTSIDE = "MODEL=/models/big\n"

# each sets MODEL on line 2, after OUTSIDE, by what (shown as in the note)
SETTERS = {
    "for": ("for MODEL in /m/a /m/b; do echo; done\n", "a `for` loop"),
    "select": ("select MODEL in /m/a; do break; done </dev/null\n", "a `select` loop"),
    "if-read": ('if read -r MODEL <<< "/m/read"; then :; fi\n', "`read`"),
    "read-with-options": ("read -r -p 'model: ' -t 5 MODEL </dev/tty\n", "`read`"),
    "read-array": ("read -ra MODEL <<< '/m/a /m/b'\n", "`read`"),
    "while-read": ("while read -r X MODEL; do :; done < list.txt\n", "`read`"),
    "printf": ("printf -v MODEL %s /m/p\n", "`printf -v`"),
    "printf-attached": ("printf -vMODEL %s /m/p\n", "`printf -v`"),
    "mapfile": ("mapfile -t MODEL < list.txt\n", "`mapfile`"),
    "readarray": ("readarray MODEL < list.txt\n", "`readarray`"),
    "getopts": ("getopts m: MODEL\n", "`getopts`"),
    "let": ("let 'MODEL += 1' X++\n", "`let`"),
}


def convert(tmp_path, text: str):
    script = tmp_path / "run.sh"
    script.write_text(text)
    return convert_verl(script)


@pytest.mark.parametrize("setter", list(SETTERS.values()), ids=list(SETTERS))
def test_a_variable_set_by_a_loop_or_input_is_left_to_edit_naming_what_sets_it(tmp_path, setter):
    lines, what = setter
    conversion = convert(tmp_path, OUTSIDE + lines + USE)
    assert as_given(conversion)["model"]["path"] == "$MODEL"
    assert "model.path=$MODEL" in conversion.incomplete
    assert (
        f"$MODEL: set by {what} (line 2) to a value known only when the script runs"
        in conversion.notes
    )


def test_a_sweep_around_the_verl_command_is_not_converted_with_the_value_before_it(tmp_path):
    text = (
        f"lr=3e-6\nfor lr in 1e-6 2e-6; do\n  {LAUNCH} actor_rollout_ref.actor.optim.lr=$lr\ndone\n"
    )
    conversion = convert(tmp_path, text)
    assert "lr" not in conversion.tree.get("optim", {})
    assert any(item.startswith("optim.lr=$lr: known only when") for item in conversion.dropped)


def test_an_assignment_after_the_loop_sets_the_variable_again(tmp_path):
    conversion = convert(tmp_path, OUTSIDE + "for MODEL in /m/a; do :; done\nMODEL=/m/c\n" + USE)
    assert as_given(conversion)["model"]["path"] == "/m/c"
    assert conversion.incomplete == []


def test_a_path_does_not_take_a_loop_variable_from_this_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MODEL", "/from/environment")
    conversion = convert(tmp_path, "for MODEL in /m/a; do :; done\n" + USE)
    assert as_given(conversion)["model"]["path"] == "$MODEL"


def test_a_default_does_not_stand_in_for_a_variable_read_from_input(tmp_path):
    """`${MODEL:-/m/d}` after `read MODEL` is the value read, which is not known here."""
    text = f"read -r MODEL\n{LAUNCH} actor_rollout_ref.model.path=${{MODEL:-/m/d}}\n"
    conversion = convert(tmp_path, text)
    assert as_given(conversion)["model"]["path"] == "${MODEL:-/m/d}"
    assert conversion.incomplete == ["model.path=${MODEL:-/m/d}"]


# each sets MODEL (on line 2 or 3, after OUTSIDE) inside a block that may not run
MAYBE_SETTERS = {
    "uncalled-function": 'pick_model() {\n  read -r -p "model dir? " MODEL\n}\n',
    "if-branch": 'if [ -n "$ASK" ]; then\n  read -r MODEL\nfi\n',
    "one-line-function": "pick_model() { read -r MODEL; }\n",
    "function-keyword": "function pick_model { read -r MODEL; }\n",
    "after-and": '[ -z "$KEEP" ] && read -r MODEL\n',
    "loop-in-function": "pick() { for MODEL in /m/a /m/b; do :; done; }\n",
    "pipeline": "echo /m/p | read -r MODEL\n",
}


@pytest.mark.parametrize("lines", list(MAYBE_SETTERS.values()), ids=list(MAYBE_SETTERS))
def test_a_setter_that_may_not_run_keeps_the_value_set_before_it_flagged(tmp_path, lines):
    conversion = convert(tmp_path, OUTSIDE + lines + USE)
    assert as_given(conversion)["model"]["path"] == "/models/big"
    assert conversion.incomplete == ["actor_rollout_ref.model.path=/models/big"]
    assert not any("known only when the script runs" in note for note in conversion.notes)


def test_a_setter_that_may_not_run_with_no_value_before_it_leaves_the_reference(tmp_path):
    conversion = convert(tmp_path, MAYBE_SETTERS["if-branch"] + USE)
    assert as_given(conversion)["model"]["path"] == "$MODEL"
    assert any("$MODEL is left unresolved" in note for note in conversion.notes)
