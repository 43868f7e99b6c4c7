"""verl's trainer.use_legacy_worker_impl beside loss_agg_mode=seq-mean-token-sum-norm is
refused whichever source sets the loss mode: the config file (a converted config writes
`actor.loss_agg_mode` under mfsdp's name), a command-line override, or verl's key. The
refusal read the run's verl keys and command line only, so a converted config carrying the
mode, plus the verl key as an override, trained `micro_batch` without a word.
"""

from __future__ import annotations

import pytest
import yaml

from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

SUM_NORM = "seq-mean-token-sum-norm"
REFUSED = "verl key 'trainer.use_legacy_worker_impl="


def _load(tmp_path, tree: dict, overrides: list[str]) -> GRPOConfig:
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(tree))
    return load_config(GRPOConfig, path, overrides)


def _sources(worker: str) -> dict[str, tuple[dict, list[str]]]:
    """Where the run's loss mode and verl's worker key come from: (file, command line)."""
    key = "trainer.use_legacy_worker_impl"
    mode = {"actor": {"loss_agg_mode": SUM_NORM}}
    return {
        "mode-in-file": (mode, [f"{key}={worker}"]),
        "both-in-file": ({**mode, "trainer": {"use_legacy_worker_impl": worker}}, []),
        "mode-on-command-line": (
            {"trainer": {"use_legacy_worker_impl": worker}},
            [f"actor.loss_agg_mode={SUM_NORM}"],
        ),
    }


@pytest.mark.parametrize("worker", ["auto", "enable", "disable"])
@pytest.mark.parametrize("source", ["mode-in-file", "both-in-file", "mode-on-command-line"])
def test_the_worker_key_is_refused_wherever_the_mode_is_set(tmp_path, worker, source):
    tree, overrides = _sources(worker)[source]
    with pytest.raises(ConfigError, match=REFUSED):
        _load(tmp_path, tree, overrides)


def test_the_command_lines_mode_wins_over_the_files(tmp_path):
    tree = {"actor": {"loss_agg_mode": SUM_NORM}}
    overrides = ["actor.loss_agg_mode=token-mean", "trainer.use_legacy_worker_impl=auto"]
    config = _load(tmp_path, tree, overrides)
    assert (config.actor.loss_agg_mode, config.actor.loss_normalization) == (
        "token-mean",
        "micro_batch",
    )


def test_a_verl_yaml_with_the_mode_under_mfsdps_name_is_not_carried(tmp_path):
    path = tmp_path / "verl.yaml"
    tree = {
        "actor": {"loss_agg_mode": SUM_NORM},
        "trainer": {"use_legacy_worker_impl": "auto"},
        "algorithm": {"adv_estimator": "grpo"},
    }
    path.write_text(yaml.safe_dump(tree))
    conversion = convert_verl(path, "grpo")
    assert "loss_normalization" not in conversion.tree["actor"]
    (line,) = [item for item in conversion.dropped if "use_legacy_worker_impl" in item]
    assert line.startswith("trainer.use_legacy_worker_impl=auto: ")
