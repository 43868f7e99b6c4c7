"""Every form of the shell's expansion a converted value may still hold is listed as still to
edit (exit 1), in a path key and a text key alike, and refused in a config's path key: bash's
older arithmetic `$[ ... ]` was missing from that check, and `model.path=/models/qwen$[ N ** 2
]` went into the config as text, unlisted, at exit 0, where the same written `$(( ))` was
listed. Where bash's value is known (a sum worked out, an escaped or single-quoted `$[` bash
passes as text), the converted value is compared with what bash passes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cli.main import app
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.local_paths import check_no_variables
from trainer.verl_import import convert_verl

SET = "N=3"
LAUNCH = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
# words bash passes with something left that nothing here works out: a name with no value
# (`X`), an operator the reader does not take (`**`), a command's output, a parameter, and
# `$[`/`$((` that bash passes as text (escaped in double quotes, or single-quoted)
LEFT = {
    "bracket-unknown-name": "run_$[ X + 1 ]",
    "bracket-power": "run_$[ N ** 2 ]",
    "bracket-unclosed-deeper": "run_$[ $[ $[ $[ $[ $[ $[ $[ X ] ] ] ] ] ] ] ]",
    "arithmetic-unknown-name": "run_$(( X + 1 ))",
    "arithmetic-power": "run_$(( N ** 2 ))",
    "command": "run_$(hostname)",
    "backquotes": "run_`hostname`",
    "braces": "run_${X}",
    "name": "run_$X",
    "argument": "run_$2",
    "bracket-escaped": '"run_\\$[N]b"',
    "bracket-single-quoted": "'run_$[N]b'",
    "arithmetic-escaped": '"run_\\$((N))b"',
}
# words whose value bash gives and the reader works out
KNOWN = {"bracket": "run_$[ N * 2 ]", "arithmetic": "run_$(( N * 2 ))"}


def _bash(word: str) -> str:
    done = subprocess.run(
        ["bash", "-c", f"{SET}; printf %s {word}"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _script(tmp_path: Path, word: str) -> Path:
    script = tmp_path / "run.sh"
    script.write_text(
        f"{SET}\n{LAUNCH} actor_rollout_ref.model.path=/models/{word}"
        f" trainer.experiment_name={word}\n"
    )
    return script


@pytest.mark.parametrize("word", LEFT.values(), ids=LEFT.keys())
def test_a_value_left_with_shell_syntax_is_listed_in_every_form(tmp_path, word):
    conversion = convert_verl(_script(tmp_path, word))
    path = conversion.tree["model"]["path"]
    name = conversion.tree["trainer"]["experiment_name"]
    assert path == f"/models/{name}"
    assert conversion.incomplete == [f"model.path={path}", f"trainer.experiment_name={name}"]
    if "\\$" in word or "'" in word:  # bash passes it as text: the same text is kept
        assert name == _bash(word)


@pytest.mark.parametrize("word", [LEFT["bracket-power"], LEFT["bracket-escaped"]])
def test_from_verl_exits_1_naming_the_value_to_edit(tmp_path, word):
    done = CliRunner().invoke(app, ["config", "from-verl", str(_script(tmp_path, word))])
    assert done.exit_code == 1, done.output
    assert "still to edit or add: model.path=/models/run_$" in done.output
    assert "shell arithmetic not worked out here" in done.output, done.output


@pytest.mark.parametrize("word", KNOWN.values(), ids=KNOWN.keys())
def test_a_sum_the_reader_works_out_is_bashs_value_and_not_listed(tmp_path, word):
    conversion = convert_verl(_script(tmp_path, word))
    assert conversion.incomplete == []
    assert conversion.tree["trainer"]["experiment_name"] == _bash(word) == "run_6"
    assert conversion.tree["model"]["path"] == "/models/run_6"


@pytest.mark.parametrize(
    "held, what",
    [
        ("$[N]", "an arithmetic expansion"),
        ("$[ N * 2 ]", "an arithmetic expansion"),
        ("$((N))", "an arithmetic expansion"),
        ("$((cd x) && ls)", "a command substitution"),
        ("$(hostname)", "a command substitution"),
    ],
)
def test_a_config_path_holding_arithmetic_is_refused_naming_it(tmp_path, held, what):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"run_dir": f"runs/{held}/x"}}))
    with pytest.raises(ConfigError) as caught:
        check_no_variables(load_config(SFTConfig, config))
    message = str(caught.value)
    assert message.startswith(f"trainer.run_dir: runs/{held}/x holds $"), message
    assert f"({what}:" in message and "\n" not in message
