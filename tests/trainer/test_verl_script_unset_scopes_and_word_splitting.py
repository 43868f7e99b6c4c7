"""`mfsdp config from-verl` reading `unset` and unquoted expansions as bash does: an `unset`
in a function called by one with a `local` of that name reveals the value outside (it wrote
an empty model path at exit 0), a readonly variable is not unset, a plain `unset NAME` with
no such variable unsets the function NAME, `unset -f f` stops `f` from running, and a name
made as the script runs (`unset $N`) is flagged. A quoted value holding blanks (verl's own
`data.train_files="$train_files"`) stays one word, unflagged. Values are compared with bash's
own."""

from __future__ import annotations

import pytest

from tests.support.verl_conversions import (
    LAUNCH,
    MODEL_KEY,
    MODEL_LAUNCH,
    as_given,
    bash_model_value,
    convert_launch,
)
from trainer.verl_import import convert_verl


def model_path(conversion) -> str:
    """The model path the config gives ("" where the script passes an empty one)."""
    return as_given(conversion).get("model", {}).get("path", "")


def flagged(conversion) -> bool:
    """Whether the model path is listed to check (by verl's key, or mfsdp's where its value
    is left as written)."""
    return any(item.split("=", 1)[0] in (MODEL_KEY, "model.path") for item in conversion.incomplete)


@pytest.mark.parametrize(
    "lines",
    [
        # an unset in the callee reveals the caller's hidden value, also after a second set
        f"MODEL=/m/a\ng() {{ unset MODEL; }}\nf() {{ local MODEL=/m/b; g; {LAUNCH}; }}\nf\n",
        f"MODEL=/m/a\ng() {{ unset -v MODEL; }}\nf() {{ local MODEL=/m/b; g; }}\nf\n{LAUNCH}\n",
        f"MODEL=/m/a\ng() {{ unset MODEL; }}\nf() {{ local MODEL=/m/b; g; MODEL=/m/c; }}\nf\n"
        f"{LAUNCH}\n",
        f"MODEL=/m/a\nh() {{ unset MODEL; }}\ng() {{ local MODEL=/m/c; h; {LAUNCH}; }}\n"
        f"f() {{ local MODEL=/m/b; g; }}\nf\n",
        f"MODEL=/m/a\ng() {{ unset MODEL; unset MODEL; }}\nf() {{ local MODEL=/m/b; g; }}\nf\n"
        f"{LAUNCH}\n",
        # an assignment before the call's name is a scope of its own around the call
        f"MODEL=/m/a\ng() {{ unset MODEL; {LAUNCH}; }}\nMODEL=/m/b g\n",
        # the same scope's local is unset there, as before
        f"MODEL=/m/a\nf() {{ local MODEL=/m/b; unset MODEL; {LAUNCH}; }}\nf\n",
    ],
)
def test_an_unset_of_a_calling_functions_local_reveals_the_value_it_hid(tmp_path, lines):
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == bash_model_value(tmp_path, lines)
    assert not flagged(conversion)


@pytest.mark.parametrize(
    "lines",
    [
        f"MODEL=/m/a\nreadonly MODEL\nunset MODEL 2>/dev/null\n{LAUNCH}\n",
        f"declare -r MODEL=/m/a\nunset -v MODEL 2>/dev/null\n{LAUNCH}\n",
        f"f() {{ local -r MODEL=/m/b; unset MODEL 2>/dev/null; {LAUNCH}; }}\nf\n",
    ],
)
def test_a_readonly_variable_keeps_its_value_after_unset(tmp_path, lines):
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == bash_model_value(tmp_path, lines)
    assert not flagged(conversion)


@pytest.mark.parametrize(
    "lines",
    [
        # readonly only where a branch runs: whether the unset works is known as it runs
        f'MODEL=/m/a\nif [ -n "$X" ]; then readonly MODEL; fi\nunset MODEL\n{LAUNCH}\n',
        # bash refuses the assignment and stops the script before the verl command
        f"readonly MODEL=/m/a\nMODEL=/m/b\n{LAUNCH}\n",
        # a name made as the script runs may be any variable's
        f"MODEL=/m/a\nN=MODEL\nunset $N\n{LAUNCH}\n",
        f"MODEL=/m/a\nfor v in MODEL OTHER; do unset $v; done\n{LAUNCH}\n",
    ],
)
def test_an_unset_or_assignment_known_only_as_the_script_runs_is_flagged(tmp_path, lines):
    conversion = convert_launch(tmp_path, lines)
    assert flagged(conversion)
    assert model_path(conversion) != ""


def test_a_plain_unset_of_a_function_name_removes_the_function(tmp_path):
    lines = f"MODEL=/m/a\nX() {{ MODEL=/m/b; }}\nunset X\nX\n{LAUNCH}\n"
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == bash_model_value(tmp_path, lines) == "/m/a"


@pytest.mark.parametrize("unset", ["unset -f train", "unset train"])
def test_a_function_unset_before_its_call_does_not_start_verl(tmp_path, unset):
    direct = MODEL_LAUNCH.replace("$MODEL", "/m/direct")
    script = tmp_path / "run.sh"
    script.write_text(
        f"train() {{ {MODEL_LAUNCH.replace('$MODEL', '/m/viaf')}; }}\n{direct}\n{unset}\ntrain\n"
    )
    assert model_path(convert_verl(script)) == "/m/direct"


def test_a_quoted_list_with_blanks_is_one_unflagged_word(tmp_path):
    """verl's example scripts build `files="['$a', '$b']"` and pass `data.train_files="$files"`:
    one word for bash; flagging every blank an expansion brings listed such keys in 60 of
    verl's examples."""
    lines = (
        "MODEL=/m/a\na=/d/a.parquet\nb=/d/b.parquet\nfiles=\"['$a', '$b']\"\n"
        f'{MODEL_LAUNCH} data.train_files="$files"\n'
    )
    conversion = convert_launch(tmp_path, lines)
    assert conversion.incomplete == []
    assert as_given(conversion)["data"]["train_files"] == ["/d/a.parquet", "/d/b.parquet"]
