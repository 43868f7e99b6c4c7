"""`mfsdp config from-verl` reading a launch script as bash runs it, where it read otherwise:
a Hydra `--config-name` given by a variable was taken as the user's own file (verl's Megatron
trainer config not told), a blank inside an unquoted `${1:?need lr}` split the word, `unset`
left the old value's reference as written, a variable set before a function's definition
stayed flagged after a call that surely runs, chains of calls deeper than 100 were refused,
and an unclosed quote on a line after the verl command refused the script that bash runs up
to there. Values are compared with bash's own."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.verl_conversions import (
    LAUNCH,
    MODEL_KEY,
    as_given,
    bash_model_value,
    convert_launch,
)
from tests.trainer.test_verl_megatron_optimizer_betas import MEGATRON_BETAS, OPTIM
from trainer.verl_import import convert_verl
from trainer.verl_source import VerlSourceError

GRPO = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"


def model_path(conversion) -> str:
    return as_given(conversion)["model"]["path"]


@pytest.mark.parametrize(
    "option",
    ["--config-name=$CFG", '--config-name "$CFG"', "-cn ${CFG}", "--config-name=${1:-$CFG}"],
)
def test_a_config_name_given_by_a_variable_loads_verls_megatron_trainer(tmp_path, option):
    script = tmp_path / "run.sh"
    script.write_text(f"CFG=ppo_megatron_trainer\n{GRPO} {option} {OPTIM}betas=[0.9,0.95]\n")
    conversion = convert_verl(script)
    assert conversion.tree["optim"]["betas"] == MEGATRON_BETAS
    assert not [item for item in conversion.incomplete if "config" in item]


@pytest.mark.parametrize(
    "lines",
    [
        f"MODEL=${{1:-/m/a b}}\n{LAUNCH}\n",
        f"MODEL=${{2:-/m/x}}${{1:-/m/a  b}}\n{LAUNCH}\n",
        f"train() {{\n  MODEL=${{1:?need a model}}\n  {LAUNCH}\n}}\ntrain /m/given\n",
        f"MODEL=${{OTHER:-$(echo a b)}}\nMODEL=${{1:-/m/c d}}\n{LAUNCH}\n",
    ],
)
def test_a_blank_inside_an_unquoted_parameter_expansion_stays_in_its_word(tmp_path, lines):
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == bash_model_value(tmp_path, lines)


def test_a_required_argument_with_a_message_is_left_to_the_running_script(tmp_path):
    lines = f"MODEL=${{1:?need a model}}\n{LAUNCH}\n"
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == "${1:?need a model}"
    assert f"{MODEL_KEY.split('.', 1)[1]}=${{1:?need a model}}" in conversion.incomplete


@pytest.mark.parametrize(
    "reference", ["${MODEL:-/m/default}", "${MODEL-/m/default}", "$MODEL/sub", "${MODEL}x"]
)
@pytest.mark.parametrize("unset", ["unset MODEL", "unset -v MODEL", "unset -f MODEL"])
def test_an_unset_variable_reads_as_bash_reads_it(tmp_path, monkeypatch, reference, unset):
    monkeypatch.setenv("MODEL", "/env/model")  # bash unsets what the environment gives too
    lines = f"MODEL=/m/set\n{unset}\nMODEL={reference}\n{LAUNCH}\n"
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == bash_model_value(tmp_path, lines)
    assert conversion.incomplete == []


def test_an_unset_in_a_branch_keeps_the_value_flagged(tmp_path):
    lines = f'MODEL=/m/set\nif [ -n "$X" ]; then unset -v MODEL; fi\n{LAUNCH}\n'
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == "/m/set"
    assert f"{MODEL_KEY}=/m/set" in conversion.incomplete


@pytest.mark.parametrize(
    "body",
    [
        "MODEL=$MODEL/y",
        "MODEL+=/y",
        "local MODEL=/m/local; echo $MODEL",
        ": ${MODEL:=/m/default}",
        "unset -f other",
    ],
)
def test_a_variable_set_before_a_definition_is_not_flagged_after_a_sure_call(tmp_path, body):
    lines = f"MODEL=/m/x\nsetm() {{\n  {body}\n}}\nsetm\n{LAUNCH}\n"
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == bash_model_value(tmp_path, lines)
    assert conversion.incomplete == []


def test_a_launching_function_that_sets_its_variable_from_itself_is_not_flagged(tmp_path):
    lines = f"MODEL=/m/x\ntrain() {{\n  MODEL=$MODEL\n  {LAUNCH}\n}}\ntrain\n"
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == "/m/x"
    assert conversion.incomplete == []


def test_an_uncalled_functions_setting_is_still_flagged(tmp_path):
    lines = f"MODEL=/m/x\nsetm() {{\n  MODEL=/m/y\n}}\n{LAUNCH}\n"
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == "/m/x"
    assert f"{MODEL_KEY}=/m/x" in conversion.incomplete


@pytest.mark.parametrize("depth", [130, 250])
def test_a_chain_of_a_few_hundred_calls_converts(tmp_path, depth):
    chain = "".join(f"f{n}() {{\n  f{n - 1}\n}}\n" for n in range(1, depth + 1))
    lines = f"MODEL=/m/deep\nf0() {{\n  {LAUNCH}\n}}\n{chain}f{depth}\n"
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == bash_model_value(tmp_path, lines)


def test_an_unclosed_quote_after_the_verl_command_stops_bash_after_it(tmp_path):
    lines = f'MODEL=/m/run\n{LAUNCH}\necho "done\n'
    conversion = convert_launch(tmp_path, lines)
    assert model_path(conversion) == "/m/run"
    assert conversion.incomplete == []
    assert any(note.startswith("line 3: quotes that do not close") for note in conversion.notes)
    ran = lines.replace(LAUNCH, "echo verl-ran")
    done = subprocess.run(["bash", "-c", ran], capture_output=True, text=True, timeout=30)
    assert done.stdout == "verl-ran\n" and done.returncode != 0


@pytest.mark.parametrize(
    "lines",
    [
        f'MODEL=/m/run\nif true; then\n  {LAUNCH}\n  echo "done\nfi\n',
        f'MODEL=/m/run\n{LAUNCH} &&\necho "done\n',
        f'MODEL=/m/run\n{LAUNCH}\necho "done\n{LAUNCH}\n',
    ],
)
def test_an_unclosed_quote_that_a_verl_command_runs_into_is_still_refused(tmp_path, lines):
    with pytest.raises(VerlSourceError, match="do not close"):
        convert_launch(tmp_path, lines)
