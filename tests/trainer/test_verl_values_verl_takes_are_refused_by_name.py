"""A value verl accepts that the mfsdp key it sets does not take (`trainer.logger` entries
`file`, `mlflow`, `trackio`, `rl_insight`; `kl_loss_type=full`; `trainer.device=npu`) is
a key not carried over, named with
why: `mfsdp config from-verl` printed no YAML and exited 2 ("not a verl script") on the
loader's enum error. verl's file logger is not mfsdp's jsonl: another record layout, in
another place (verl/utils/tracking.py FileLogger)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl
from trainer.verl_keys import adopt_pairs


def convert_script(tmp_path: Path, module: str, key: str) -> object:
    script = tmp_path / "run.sh"
    grpo = " algorithm.adv_estimator=grpo" if module == "verl.trainer.main_ppo" else ""
    script.write_text(f"python3 -m {module}{grpo} \\\n    {key}\n")
    return convert_verl(script)


@pytest.mark.parametrize(
    "logger, refused", [("file", "file"), ("mlflow", "mlflow"), ("trackio", "trackio")]
)
def test_a_tracker_verl_has_and_mfsdp_lacks_is_named(tmp_path: Path, logger, refused):
    done = convert_script(
        tmp_path, "verl.trainer.main_ppo", f'trainer.logger=\'["console","{logger}"]\''
    )
    assert len(done.dropped) == 1
    assert done.dropped[0].startswith(f"trainer.logger=['console', '{logger}']: {refused}: ")
    assert "logger" not in done.tree.get("trainer", {})


def test_verls_file_logger_is_not_read_as_mfsdps_jsonl(tmp_path: Path):
    done = convert_script(
        tmp_path, "verl.trainer.sft_trainer", 'trainer.logger=\'["console","file"]\''
    )
    assert "VERL_FILE_LOGGER_ROOT" in done.dropped[0]
    assert "metrics.jsonl" in done.dropped[0]


@pytest.mark.parametrize(
    "key",
    [
        "actor_rollout_ref.actor.kl_loss_type=full",
        "trainer.device=npu",
    ],
)
def test_other_values_verl_takes_are_named(tmp_path: Path, key):
    done = convert_script(tmp_path, "verl.trainer.main_ppo", key)
    assert [item.split(": ", 1)[0] for item in done.dropped] == [key]


def test_a_yaml_with_verls_tracker_converts_with_it_named(tmp_path: Path):
    source = tmp_path / "run.yaml"
    source.write_text(
        "algorithm:\n  adv_estimator: grpo\ntrainer:\n  logger: [console, rl_insight]\n"
        "actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 8\n"
    )
    done = convert_verl(source)
    assert [item.split(": ", 1)[0] for item in done.dropped] == [
        "trainer.logger=['console', 'rl_insight']"
    ]
    assert done.tree["actor"]["ppo_mini_batch_size"] == 8


def test_mfsdp_train_names_the_value_too():
    with pytest.raises(ConfigError, match=r"'trainer.logger\[1\]' expects one of console"):
        load_config(SFTConfig, None, ["model.shape=tiny", "trainer.logger=[console,file]"])
    assert adopt_pairs(GRPOConfig, [("trainer.logger", ["console", "wandb"])], "x") == [
        ("trainer.logger", ["console", "wandb"])
    ]
