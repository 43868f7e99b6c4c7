"""docs/json.md lists every top-level field each `--json` command prints: each command is run
here on tiny inputs and its object's keys compared with its table, so the page cannot drift
from the output."""

from __future__ import annotations

import json
import re

import pytest

from cli.main import main
from tests.cli.test_cli_option_levels_and_json import (
    FSDP_RUN,
    GRPO_CONFIG,
    JSON_COMMANDS,
    _data_args,
    _run_main,
    _train_sft_args,
)
from tests.support.paths import REPO
from trainer.grpo.synthetic import write_addition_data

JSON_DOC = REPO / "docs" / "json.md"
FAILURE = "failure"  # the table of the object every command prints when it fails


def documented_fields() -> dict[str, list[str]]:
    """Each command's fields as docs/json.md's tables list them, by the command's words
    (`ckpt validate`); the failure object's under FAILURE."""
    tables: dict[str, list[str]] = {}
    names: list[str] = []
    for line in JSON_DOC.read_text().splitlines():
        if line.startswith("## "):
            names = re.findall(r"`mfsdp ([a-z0-9 -]+)`", line)
            names = names or ([FAILURE] if "failure object" in line else [])
        field = re.match(r"\| `(\w+)` \|", line)
        if field:
            for name in names:
                tables.setdefault(name, []).append(field.group(1))
    return tables


def _grpo_args(tmp_path) -> list[str]:
    files = write_addition_data(tmp_path / "data", digits=4)
    return [
        *("train", "grpo", "--config", str(GRPO_CONFIG), "--json"),
        *(f"data.train_files={files['rl_train']}", f"trainer.run_dir={tmp_path / 'grpo'}"),
        *("data.val_files=[]", "trainer.total_steps=1", "data.train_batch_size=2"),
        *("rollout.n=2", "rollout.max_response_length=2", "actor.ppo_mini_batch_size=2"),
        *("actor.ppo_micro_batch_size_per_gpu=2", "actor.log_prob_micro_batch_size_per_gpu=2"),
    ]


def _command_args(command: str, tmp_path) -> list[str]:
    """`mfsdp ARGS --json` for `command` on tiny inputs (import-hf reads EXPORTED)."""
    group, name = command.split()
    if group == "data":
        return [*_data_args(name, tmp_path), "--json"]
    hf_dir = str(tmp_path / EXPORTED)
    return {
        "train sft": _train_sft_args(tmp_path),
        "train grpo": _grpo_args(tmp_path),
        "ckpt validate": ["ckpt", "validate", str(FSDP_RUN), "--json"],
        "ckpt inspect": ["ckpt", "inspect", str(FSDP_RUN), "--json"],
        "ckpt export-hf": ["ckpt", "export-hf", str(FSDP_RUN), "--out", hf_dir, "--json"],
        "ckpt import-hf": ["ckpt", "import-hf", hf_dir, "--out", str(tmp_path / "imp"), "--json"],
        "config check": ["config", "check", *_train_sft_args(tmp_path)[1:]],
    }[command]


EXPORTED = "hf"  # export-hf's output under tmp_path


def _succeed(monkeypatch, capsys, *args: str) -> str:
    """stdout of `mfsdp ARGS` run through the real entry point in this process, which ends
    without an exit status of its own when the command succeeded."""
    monkeypatch.setattr("sys.argv", ["mfsdp", *args])
    main()
    return capsys.readouterr().out


def test_every_json_command_has_a_table():
    documented = set(documented_fields()) - {FAILURE}
    assert documented == {" ".join(words) for words in JSON_COMMANDS}


@pytest.mark.parametrize("command", sorted(set(documented_fields()) - {FAILURE}))
def test_a_commands_json_fields_are_the_documented_ones(monkeypatch, capsys, tmp_path, command):
    if command == "ckpt import-hf":
        _succeed(
            monkeypatch,
            capsys,
            "ckpt",
            "export-hf",
            str(FSDP_RUN),
            "--out",
            str(tmp_path / EXPORTED),
        )
    printed = json.loads(_succeed(monkeypatch, capsys, *_command_args(command, tmp_path)))
    assert list(printed) == documented_fields()[command]


def test_the_failure_objects_fields_are_the_documented_ones(monkeypatch, capsys, tmp_path):
    code, out, _err = _run_main(
        monkeypatch, capsys, "ckpt", "validate", str(tmp_path / "absent"), "--json"
    )
    assert list(json.loads(out)) == documented_fields()[FAILURE] and code == 2
