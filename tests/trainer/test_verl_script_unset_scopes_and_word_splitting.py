"""`mfsdp config from-verl` reading `unset` and unquoted expansions as bash does: an `unset`
in a function called by one with a `local` of that name reveals the value outside (it wrote
an empty model path at exit 0), a readonly variable is not unset, a plain `unset NAME` with
no such variable unsets the function NAME, `unset -f f` stops `f` from running, and a name
made as the script runs (`unset $N`) or a blank from a variable's value in the verl command
(which bash splits into words) is flagged. Values are compared with bash's own."""

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


@pytest.mark.parametrize(
    ("written", "value"),
    [
        ("${MODEL:-/m/a b}", "/m/a b"),
        ("$MODEL", "/m/c d"),
        ("/m/${X:-a}${Y:-b c}", "/m/ab c"),
    ],
)
def test_a_blank_from_an_expansion_in_the_verl_command_is_flagged(tmp_path, written, value):
    lines = f"MODEL='/m/c d'\n{LAUNCH}\n" if written == "$MODEL" else f"{LAUNCH}\n"
    script = tmp_path / "run.sh"
    script.write_text(lines.replace(LAUNCH, MODEL_LAUNCH.replace("$MODEL", written)))
    conversion = convert_verl(script)
    assert model_path(conversion) == value
    assert f"{MODEL_KEY}={value}" in conversion.incomplete


def test_a_value_without_a_blank_is_not_flagged(tmp_path):
    lines = f"MODEL=/m/a\nNAME='a b'\n{LAUNCH}\n"
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == bash_model_value(tmp_path, lines)
    assert not flagged(conversion)
