"""`mfsdp config from-verl` giving verl's config what verl's run gets, where it did not.

Each expectation is what bash passes (`bash_words`, a stand-in for python printing them),
then what Hydra 1.3's OverridesParser makes of each word (checked against hydra-core
1.3.8), then what verl's config classes accept (verl/workers/config/optimizer.py):
quoted values' backslashes before a quote are Hydra's escapes; `set -- "${A[@]}" k=v`
passes the array's words on to `"$@"`; `~key` then `+key=v` trains with v; `key=v` then
`key=null` with verl's "not set"; `$'k=v'` is the override `k=v`; warmup_style is
constant or cosine; values Hydra refuses (`${x}}`, a backquote outside its quotes) are
refused, as verl does not start on them.
"""

from __future__ import annotations

import pytest

from tests.trainer.test_verl_script_words_split_as_bash_splits_them import (
    bash_words,
    read_words,
)
from trainer.verl_hydra_value import HydraValueError, hydra_override_value
from trainer.verl_import import convert_verl
from trainer.verl_source import VerlSourceError

VERL = "python3 -m verl.trainer.main_ppo"
HEAD = f"{VERL} algorithm.adv_estimator=grpo actor_rollout_ref.model.path=/m"
GRPO = f"{HEAD} data.train_files=/d/t.parquet"
OPTIM = "actor_rollout_ref.actor.optim."


def convert(tmp_path, text: str):
    source = tmp_path / "run.sh"
    source.write_text(text)
    return convert_verl(source)


def dropped_keys(conversion) -> list[str]:
    return [item.partition(":")[0] for item in conversion.dropped]


# --- 1. a quoted value's backslashes: an escape only in a run right before a quote


@pytest.mark.parametrize(
    ("value", "hydra"),
    [
        (r'"exp\\\\"', "exp\\\\"),  # four before the closing quote: two
        (r"'a\\'", "a\\"),
        (r"'x\\\'y'", "x\\'y"),  # three before an inner quote: one and the quote
        (r'"x\\\"y"', 'x\\"y'),
        (r"'a\\b'", "a\\\\b"),  # not before a quote: text
        (r"'a\tb\\'", "a\\tb\\"),
        (r"''", ""),
        (r"'\\'", "\\"),
        (r"['/x/a\\']", ["/x/a\\"]),
        (r"{k:'v\\'}", {"k": "v\\"}),
    ],
)
def test_quoted_backslashes_as_hydra_unescapes_them(value, hydra):
    assert hydra_override_value(value) == hydra


@pytest.mark.parametrize("value", [r"'a\'", r'"a\"', r"'a\\\'", r"['a\']"])
def test_a_quote_closed_only_by_an_escaped_quote_is_unclosed(value):
    """Hydra: "token recognition error"; it was read as the text before the quote."""
    with pytest.raises(HydraValueError):
        hydra_override_value(value)


def test_a_script_quoted_value_ending_in_backslashes(tmp_path):
    text = (
        f"{GRPO} trainer.project_name=\"'run\\\\\\\\'\" 'trainer.experiment_name=\"exp\\\\\\\\\"'\n"
    )
    assert bash_words(tmp_path, text)[-2:] == [
        "trainer.project_name='run\\\\'",
        'trainer.experiment_name="exp\\\\\\\\"',
    ]
    trainer = convert(tmp_path, text).tree["trainer"]
    assert (trainer["project_name"], trainer["experiment_name"]) == ("run\\", "exp\\\\")


# --- 2. `set --` words expanded into parameters as bash expands them


@pytest.mark.parametrize(
    "text",
    [
        f'A=({OPTIM}lr=2e-6 data.train_files=/d/t.parquet)\nset -- "${{A[@]}}" x.n=4\n'
        f'{VERL} "$@"\n',
        f'A=(a.b=1 c.d=2 e.f=3)\nset -- "${{A[@]:1}}" "${{A[0]}}"\n{VERL} "$@"\n',
        'X="a.b=1 c.d=2"\nP="p q"\nset -- $X "x.y=$P"\n{VERL} "$@"\n',
        'set -- a b\nset -- "$@" c\nset -- "x.z=$3" x.y=$2\n{VERL} "$@"\n',
        'f() { set -- "$@" e.f=3; {VERL} "$@"; }\nf a.b=1 "c.d=2 x"\n',
    ],
)
def test_set_words_give_bashs_parameters(tmp_path, text):
    text = text.replace("{VERL}", VERL)
    words, refused = read_words(tmp_path, text)
    assert refused == ""
    assert words == bash_words(tmp_path, text)


def test_an_arrays_overrides_through_set_are_carried_over(tmp_path):
    text = (
        f"args=(actor_rollout_ref.model.path=/m data.train_files=/d/t.parquet {OPTIM}lr=2e-6)\n"
        'set -- "${args[@]}" actor_rollout_ref.rollout.n=4\n'
        f'{VERL} algorithm.adv_estimator=grpo "$@"\n'
    )
    conversion = convert(tmp_path, text)
    assert conversion.tree["optim"]["lr"] == 2e-6
    assert conversion.tree["model"]["path"] == "/m"
    assert conversion.tree["rollout"]["n"] == 4
    assert not conversion.incomplete


@pytest.mark.parametrize(
    "lines",
    [
        'set -- actor_rollout_ref.model.path=/m "$@"',  # with the script's own arguments
        'read -ra A\nset -- "${A[@]}"',  # an array known only as the script runs
        "set -- a.b=1\nshift $N",  # moved by a count not known here
        'set -- a.b=1\nset -- "x.y=$*"',  # the parameters within a word
    ],
)
def test_parameters_set_but_not_known_are_listed_to_add(tmp_path, lines):
    """They went at exit 0, with a note calling them the script's own arguments."""
    conversion = convert(tmp_path, f'{lines}\n{GRPO} "$@"\n')
    assert [item.partition(":")[0] for item in conversion.incomplete] == ["$@"]


def test_the_scripts_own_arguments_alone_stay_the_users(tmp_path):
    conversion = convert(tmp_path, f'set -- "$@"\n{GRPO} "$@"\n')
    assert not conversion.incomplete
    assert any(note.startswith("$@: the script passes its own") for note in conversion.notes)


# --- 3 and 5. Hydra's overrides in order: the last one on a key wins


def test_a_key_deleted_then_added_again_trains_with_the_value_added(tmp_path):
    conversion = convert(tmp_path, f"{GRPO} ~{OPTIM}lr +{OPTIM}lr=3e-6\n")
    assert conversion.tree["optim"]["lr"] == 3e-6
    assert conversion.dropped == []


def test_a_key_added_then_deleted_is_still_not_carried_over(tmp_path):
    conversion = convert(tmp_path, f"{GRPO} ~{OPTIM}lr +{OPTIM}lr=3e-6 ~{OPTIM}lr\n")
    assert "lr" not in conversion.tree.get("optim", {})
    assert dropped_keys(conversion) == [f"~{OPTIM}lr"]


@pytest.mark.parametrize("style", ["warmup_style", "lr_scheduler_type"])
def test_a_later_null_on_the_same_key_wins(tmp_path, style):
    """verl then trains with its default schedule, constant; the config had cosine."""
    conversion = convert(tmp_path, f"{GRPO} {OPTIM}{style}=cosine {OPTIM}{style}=null\n")
    assert conversion.tree.get("optim", {}).get("scheduler", "constant") == "constant"
    assert conversion.dropped == []


# --- 4. a whole word in bash's $'...' quoting


def test_ansi_c_quoted_overrides_are_carried_over(tmp_path):
    text = (
        f"{GRPO} $'{OPTIM}lr=3e-5' $'actor_rollout_ref.rollout.n=8'"
        " $'trainer.project_name=a\\x41'\n"
    )
    words, refused = read_words(tmp_path, text)
    assert (words[-3:], refused) == (bash_words(tmp_path, text)[-3:], "")
    conversion = convert(tmp_path, text)
    assert conversion.tree["optim"]["lr"] == 3e-5
    assert conversion.tree["rollout"]["n"] == 8
    assert conversion.tree["trainer"]["project_name"] == "aA"


# --- 6. verl's FSDP optimizer takes constant or cosine schedules only


@pytest.mark.parametrize("style", ["warmup_style", "lr_scheduler_type"])
def test_a_schedule_verl_asserts_against_is_not_carried_over(tmp_path, style):
    conversion = convert(tmp_path, f"{GRPO} {OPTIM}{style}=linear\n")
    assert dropped_keys(conversion) == [f"{OPTIM}{style}=linear"]
    assert "scheduler" not in conversion.tree.get("optim", {})


# --- 7. values Hydra refuses for the `${` in them, and a backquote bash passes as text


@pytest.mark.parametrize(
    "value",
    [
        "${",
        "${}",
        "${x}}",
        "x'${y}'",
        "${oc.env:A,${oc.env:B}}",
        "${oc.decode:'{a: 1}'}",
        "a`b`c",
    ],
)
def test_a_value_hydra_refuses_as_bash_passes_it_is_refused(tmp_path, value):
    quoted = "'" + value.replace("'", "'\\''") + "'"
    with pytest.raises(VerlSourceError, match=r"trainer\.experiment_name"):
        convert(tmp_path, f"{GRPO} trainer.experiment_name={quoted}\n")


@pytest.mark.parametrize("value", ["${oc.env:HOME}", "${x}", "a_${trainer.project_name}"])
def test_an_interpolation_hydra_takes_is_still_left_to_edit(tmp_path, value):
    conversion = convert(tmp_path, f"{GRPO} 'trainer.experiment_name={value}'\n")
    assert [item.partition("=")[0] for item in conversion.incomplete] == ["trainer.experiment_name"]


def test_a_quoted_word_set_is_one_parameter_whatever_ifs(tmp_path):
    """Known only as the script runs, IFS splits no quoted word: `"$X"` is one parameter."""
    text = f'read -r IFS\nX="a b"\nset -- "trainer.project_name=$X"\n{VERL} "$@"\n'
    words, refused = read_words(tmp_path, text)
    assert (words, refused) == (["trainer.project_name=a b"], "")


def test_an_unquoted_word_set_at_an_unknown_ifs_is_listed_to_add(tmp_path):
    text = f'read -r IFS\nX="a.b=1 c.d=2"\nset -- $X\n{GRPO} "$@"\n'
    assert [item.partition(":")[0] for item in convert(tmp_path, text).incomplete] == ["$@"]


@pytest.mark.parametrize(
    "text",
    [
        'X=trainer.total_epochs=2\n{VERL} "$X" "${X}0"\n',
        'set -- trainer.total_epochs=2 "trainer.project_name=a b"\n{VERL} "$1" "$2"\n',
        'f() { {VERL} "$1"; }\nf trainer.total_epochs=2\n',
    ],
)
def test_a_quoted_word_whose_equals_sign_a_variable_gives(tmp_path, text):
    """bash passes the override; read as written, the word held no `=` and went at exit 0."""
    text = text.replace("{VERL}", VERL)
    words, refused = read_words(tmp_path, text)
    assert (words, refused) == (bash_words(tmp_path, text), "")
