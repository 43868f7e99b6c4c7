"""A run's `RUN/config.yaml` reads back as the config the run used, `model.overrides`
included. Those values are read as Hydra reads them (`1e5` a float, `'1e5'` text), but the
file was written by YAML 1.1's rules, which leave `1e5` bare as text: the run's text
`'1e5'` came back from `--config RUN/config.yaml` as the float 100000.0, and its resume
named the setting as changed. The same holds for the config `mfsdp config from-verl`
writes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mfsdp_ckpt.format.layout import CheckpointPaths
from trainer.config import RESOLVED_CONFIG_FILE, SFTConfig, load_config, write_resolved_config
from trainer.config_history import keep_changed_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

# text that one of the readers of a config (YAML 1.1's, Hydra's floats) reads as no text
NUMBER_LIKE_TEXT = [
    "1e5",
    "5.0e5",
    "1E5",
    "-1e-6",
    "+1e5",
    "1_0e5",
    "1.e5",
    ".5e+3",
    "1_000",
    "0x10",
    "010",
    ".inf",
    "-.Inf",
    ".nan",
    "1:30.5",
    "yes",
    "null",
    "2024-01-01",
]
FLOATS = [1e-5, 1e6, 5e5, -1e-6, 2e-2, 0.0, math.inf, -math.inf]


def _yaml_file(path: Path, overrides: dict[str, str]) -> Path:
    """A config file of `model.overrides` written as a user writes them (each value as
    given: quoted for text, bare for a number)."""
    lines = ["model:", "  overrides:"] + [f"    {key}: {value}" for key, value in overrides.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _round_trip(config: SFTConfig, run_dir: Path) -> SFTConfig:
    write_resolved_config(run_dir, config)
    return load_config(SFTConfig, run_dir / RESOLVED_CONFIG_FILE)


@pytest.mark.parametrize("text", NUMBER_LIKE_TEXT)
def test_number_like_text_stays_text(tmp_path, text):
    quoted = "'" + text + "'"
    given = _yaml_file(
        tmp_path / "run.yaml", {"_name_or_path": quoted, "nested": f"{{x: {quoted}}}"}
    )
    config = load_config(SFTConfig, given)
    assert config.model.overrides == {"_name_or_path": text, "nested": {"x": text}}
    back = _round_trip(config, tmp_path / "run")
    assert back.model.overrides == config.model.overrides
    assert back == config


def test_floats_stay_floats(tmp_path):
    config = load_config(SFTConfig)
    config.model.overrides = {f"f{index}": value for index, value in enumerate(FLOATS)}
    config.model.overrides["list"] = [1e-5, "1e-5"]
    back = _round_trip(config, tmp_path / "run")
    assert back.model.overrides == config.model.overrides
    assert all(
        type(back.model.overrides[key]) is float for key in config.model.overrides if key != "list"
    )
    config.model.overrides = {"nan": math.nan}
    assert math.isnan(_round_trip(config, tmp_path / "nan").model.overrides["nan"])


def test_written_exponent_floats_are_floats_in_the_file(tmp_path):
    """The bare form a user writes (`rms_norm_eps: 1e-5`, a float as Hydra reads it) is still
    a float once written and read back."""
    given = _yaml_file(tmp_path / "run.yaml", {"rms_norm_eps": "1e-5", "rope_theta": "1e6"})
    config = load_config(SFTConfig, given)
    assert config.model.overrides == {"rms_norm_eps": 1e-5, "rope_theta": 1e6}
    assert _round_trip(config, tmp_path / "run").model.overrides == config.model.overrides


def test_a_resume_from_the_written_config_names_no_change(tmp_path):
    run = tmp_path / "run"
    given = _yaml_file(tmp_path / "run.yaml", {"_name_or_path": "'1e5'", "rope_theta": "1e6"})
    write_resolved_config(run, load_config(SFTConfig, given, [f"trainer.run_dir={run}"]))
    again = load_config(SFTConfig, run / RESOLVED_CONFIG_FILE)
    step = run / "global_step_2"
    resumed = CheckpointPaths(dist_ckpt=step / "dist_ckpt", step_dir=step, run_dir=run)
    assert keep_changed_config(run, 2, again, resumed) is None


def test_from_verl_writes_number_like_text_as_text(tmp_path):
    source = tmp_path / "ppo.yaml"
    source.write_text(
        "algorithm: {adv_estimator: grpo}\n"
        "actor_rollout_ref: {model: {path: /m}}\n"
        "model: {overrides: {_name_or_path: '1e5', rms_norm_eps: 1e-5}}\n"
    )
    converted = tmp_path / "grpo.yaml"
    converted.write_text(convert_verl(source).to_yaml(str(source)))
    config = load_config(GRPOConfig, converted)
    assert config.model.overrides == {"_name_or_path": "1e5", "rms_norm_eps": 1e-5}
