"""A verl key and its mfsdp key given together at different values are refused in one line
naming both: `trainer.default_local_dir=runs/a trainer.run_dir=runs/b` noted runs/a and
trained into runs/b, the later of the two winning silently. At one value they are one
setting; across the file and the command line, the command line overrides as for any key."""

from __future__ import annotations

import pytest
import yaml

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig

BASE = ["data.train_files=[/d/t.parquet]"]


@pytest.mark.parametrize(
    "cls, first, second",
    [
        (SFTConfig, "trainer.default_local_dir=runs/a", "trainer.run_dir=runs/b"),
        (SFTConfig, "trainer.run_dir=runs/b", "trainer.default_local_dir=runs/a"),
        (SFTConfig, "trainer.total_training_steps=2", "trainer.total_steps=1"),
        (SFTConfig, "trainer.total_steps=1", "trainer.total_training_steps=2"),
        (GRPOConfig, "actor_rollout_ref.actor.optim.lr=1e-5", "optim.lr=2e-5"),
    ],
)
def test_two_spellings_at_two_values_are_refused_naming_both(cls, first, second):
    with pytest.raises(ConfigError) as caught:
        load_config(cls, None, [*BASE, first, second])
    message = str(caught.value)
    assert "\n" not in message
    assert first in message and second in message
    assert "one setting here, given two values" in message


def test_two_spellings_at_one_value_are_one_setting():
    cfg = load_config(
        SFTConfig, None, [*BASE, "trainer.default_local_dir=runs/a", "trainer.run_dir=runs/a"]
    )
    assert cfg.trainer.run_dir == "runs/a"


def test_the_command_line_overrides_the_files_other_spelling(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"run_dir": "runs/file"}}))
    cfg = load_config(SFTConfig, path, [*BASE, "trainer.default_local_dir=runs/cli"])
    assert cfg.trainer.run_dir == "runs/cli"


def test_two_spellings_in_one_file_are_refused(tmp_path):
    path = tmp_path / "run.yaml"
    tree = {"data": {"train_files": ["/d/t.parquet"]}}
    tree["trainer"] = {"default_local_dir": "runs/a", "run_dir": "runs/b"}
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, path)
    assert "trainer.default_local_dir=runs/a and trainer.run_dir=runs/b" in str(caught.value)
