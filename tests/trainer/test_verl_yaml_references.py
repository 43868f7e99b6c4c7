"""`mfsdp config from-verl` fills in OmegaConf's `${a.b}` references between a verl YAML's
keys, as verl's loader does (trainer/verl_interpolation.py): verl's sft_trainer.yaml writes
`default_local_dir: checkpoints/${trainer.project_name}/${trainer.experiment_name}`, which
was carried over as a path to edit "holding a shell variable". Resolvers stay, named as what
they are; references that double a value each time are bounded."""

from __future__ import annotations

import pytest

from trainer.verl_import import VerlSourceError, convert_verl
from trainer.verl_interpolation import resolve


def test_absolute_relative_and_whole_references():
    tree = {
        "trainer": {
            "project_name": "p",
            "run": "${.project_name}_1",
            "checkpoint": {"save": ["model"], "load": "${..checkpoint.save}", "up": "${..run}"},
            "files": ["${trainer.project_name}/a", 3],
        },
        "loop": "${loop}",
        "env": "${oc.env:HOME}",
        "absent": "${no.such.key}",
    }
    assert resolve(tree, 10_000) == [
        "trainer.run",
        "trainer.checkpoint.load",
        "trainer.checkpoint.up",
        "trainer.files",
    ]
    assert tree["trainer"]["checkpoint"] == {"save": ["model"], "load": ["model"], "up": "p_1"}
    assert tree["trainer"]["files"] == ["p/a", 3]
    assert (tree["loop"], tree["env"], tree["absent"]) == (
        "${loop}",
        "${oc.env:HOME}",
        "${no.such.key}",
    )


def test_a_resolver_is_left_to_edit_and_named_as_one(tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text("trainer:\n  default_local_dir: ${oc.env:HOME}/runs\n  project_name: p\n")
    conversion = convert_verl(config, "sft")
    assert conversion.incomplete == ["trainer.run_dir=${oc.env:HOME}/runs"]
    assert any("an OmegaConf interpolation" in note for note in conversion.notes)


def test_references_that_double_a_value_are_bounded(tmp_path):
    lines = ["k0: " + "x" * 1000] + [f"k{i}: ${{k{i - 1}}}${{k{i - 1}}}" for i in range(1, 40)]
    config = tmp_path / "bomb.yaml"
    config.write_text("\n".join(lines) + "\n")
    with pytest.raises(VerlSourceError, match=r"bomb\.yaml: its \$\{\.\.\.\} references fill in"):
        convert_verl(config, "sft")
