"""`mfsdp --help` and each group's --help list their commands with a summary that is whole
(click cut a long first sentence mid-word: "Work with run configs (YAML files for
`mfsdp train sft|grpo..."), and the tiny GRPO example is run for the same number of steps
wherever it is shown: the example config's header, `mfsdp train --help`, `mfsdp train grpo
--help` and `mfsdp data synthetic --help`."""

from __future__ import annotations

import re

import click
import pytest
import yaml
from click.testing import CliRunner

from cli.app import app
from tests.support.paths import REPO

GROUPS = [
    ("",),
    *[(name,) for name, command in app.commands.items() if isinstance(command, click.Group)],
]
GRPO_TINY = REPO / "examples" / "grpo_tiny_cpu.yaml"


def listed_summaries(words: tuple[str, ...]) -> list[str]:
    """The summaries the Commands section of `mfsdp WORDS --help` lists."""
    done = CliRunner().invoke(app, [*filter(None, words), "--help"], terminal_width=80)
    assert done.exit_code == 0, done.output
    section = done.output.split("Commands:\n", 1)[1]
    return [line.split(None, 1)[1] for line in section.splitlines() if line.strip()]


@pytest.mark.parametrize("words", GROUPS, ids=" ".join)
def test_every_listed_summary_is_whole(words):
    summaries = listed_summaries(words)
    assert summaries
    for summary in summaries:
        assert not summary.endswith("..."), summary
        assert summary.endswith("."), summary


def test_the_tiny_grpo_example_runs_the_same_steps_wherever_shown():
    texts = [GRPO_TINY.read_text()]
    for words in (("train",), ("train", "grpo"), ("data", "synthetic")):
        done = CliRunner().invoke(app, [*words, "--help"])
        assert done.exit_code == 0, done.output
        texts.append(done.output)
    shown = []
    for text in texts:
        lines = [
            line for line in text.splitlines() if "--config examples/grpo_tiny_cpu.yaml" in line
        ]
        assert lines, text
        shown += [re.search(r"trainer\.total_steps=(\d+)", line) for line in lines]
    steps = {int(found.group(1)) if found else None for found in shown}
    assert steps == {yaml.safe_load(GRPO_TINY.read_text())["trainer"]["total_steps"]}
