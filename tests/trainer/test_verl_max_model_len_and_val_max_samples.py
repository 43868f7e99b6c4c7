"""verl's `rollout.max_model_len` caps each response at max_model_len minus its prompt's
length: it was ignored at any value, so a run verl cut short trained longer responses here.
It is taken at null or at least prompt + response lengths, and refused below. verl's
`data.val_max_samples` limits rows only above 0 (0 is every row, as -1): 0 was refused as not
positive; its N rows are verl's random pick, mfsdp's the first N, which from-verl says."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

KEY = "actor_rollout_ref.rollout.max_model_len"
LENGTHS = ["data.max_prompt_length=512", "data.max_response_length=1024"]
MAIN_PPO = (
    "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
    " data.train_files=/d/t.parquet actor_rollout_ref.model.path=/m"
)


@pytest.mark.parametrize("value", ["null", "1536", "4096"])
def test_max_model_len_at_null_or_the_sum_is_taken(value):
    config = load_config(GRPOConfig, None, [*LENGTHS, f"{KEY}={value}"])
    assert config.rollout.max_response_length == 1024


@pytest.mark.parametrize(
    ("value", "fix"),
    [("1024", "to at most 512"), ("1535", "to at most 1023"), ("300", "no room for a response")],
)
def test_max_model_len_below_the_sum_is_refused_naming_the_fix(value, fix):
    with pytest.raises(ConfigError) as refused:
        load_config(GRPOConfig, None, [*LENGTHS, f"{KEY}={value}"])
    said = str(refused.value)
    assert f"'{KEY}={value}'" in said and "(512 + 1024)" in said and fix in said, said
    assert "\n" not in said


def test_max_model_len_reads_mfsdps_own_keys_and_defaults():
    with pytest.raises(ConfigError, match=r"\(512 \+ 512\)"):
        load_config(GRPOConfig, None, [f"{KEY}=1000"])  # mfsdp's defaults, 512 and 512
    with pytest.raises(ConfigError, match=r"\(100 \+ 200\)"):
        load_config(
            GRPOConfig,
            None,
            ["data.max_prompt_length=100", "rollout.max_response_length=200", f"{KEY}=299"],
        )
    load_config(GRPOConfig, None, ["data.max_prompt_length=100", f"{KEY}=612"])


def test_from_verl_does_not_carry_a_short_max_model_len(tmp_path: Path):
    script = tmp_path / "run.sh"
    script.write_text(f"{MAIN_PPO} {' '.join(LENGTHS)} {KEY}=1024\n")
    conversion = convert_verl(script)
    assert [line for line in conversion.dropped if line.startswith(f"{KEY}=1024")]


@pytest.mark.parametrize("value", ["0", "-1"])
def test_val_max_samples_0_is_every_row_as_in_verl(value):
    assert (
        load_config(GRPOConfig, None, [f"data.val_max_samples={value}"]).data.val_max_samples
        is None
    )
    assert load_config(SFTConfig, None, [f"data.val_max_samples={value}"]) == SFTConfig()
    assert load_config(SFTConfig, None, [f"data.train_max_samples={value}"]) == SFTConfig()


def test_from_verl_says_the_rows_validated_are_the_first_not_verls_pick(tmp_path: Path):
    script = tmp_path / "run.sh"
    script.write_text(f"{MAIN_PPO} data.val_max_samples=64\n")
    conversion = convert_verl(script)
    assert conversion.tree["data"]["val_max_samples"] == 64
    (said,) = [note for note in conversion.notes if "val_max_samples=64" in note]
    assert "first 64 rows here" in said and "at random" in said, said
    script.write_text(f"{MAIN_PPO} data.val_max_samples=64 data.shuffle=false\n")
    assert not [note for note in convert_verl(script).notes if "at random" in note]


@pytest.mark.parametrize("value", ["$MAXLEN", "${MAXLEN}"])
def test_from_verl_says_an_unexpanded_max_model_len_is_known_only_when_the_script_runs(
    tmp_path: Path, value: str
):
    script = tmp_path / "run.sh"
    script.write_text(f"{MAIN_PPO} {' '.join(LENGTHS)} {KEY}={value}\n")  # unset here
    (said,) = [line for line in convert_verl(script).dropped if line.startswith(KEY)]
    assert said.startswith(f"{KEY}={value}: known only when the script runs"), said
    assert "512 + 1024" in said and "set it here" in said
    assert "whole number" not in said, said


def test_max_model_len_as_a_whole_float_is_that_many_tokens(tmp_path: Path):
    config = load_config(GRPOConfig, None, [*LENGTHS, f"{KEY}=1536.0"])
    assert config.rollout.max_response_length == 1024
    with pytest.raises(ConfigError, match="to at most 512"):
        load_config(GRPOConfig, None, [*LENGTHS, f"{KEY}=1024.0"])
    with pytest.raises(ConfigError, match="whole number of tokens"):
        load_config(GRPOConfig, None, [*LENGTHS, f"{KEY}=1536.5"])
    script = tmp_path / "run.sh"
    script.write_text(f"{MAIN_PPO} {' '.join(LENGTHS)} {KEY}=3072.0\n")
    assert not convert_verl(script).dropped


def test_a_null_shuffle_takes_the_first_rows_as_verl_does(tmp_path: Path):
    script = tmp_path / "run.sh"
    script.write_text(f"{MAIN_PPO} data.val_max_samples=5 data.shuffle=null\n")
    conversion = convert_verl(script)
    assert conversion.tree["data"]["shuffle"] is False
    assert not [note for note in conversion.notes if "at random" in note], conversion.notes


def test_from_verl_says_val_max_samples_0_is_every_row_not_null_in_verl(tmp_path: Path):
    script = tmp_path / "run.sh"
    script.write_text(f"{MAIN_PPO} data.val_max_samples=0\n")
    notes = convert_verl(script).notes
    assert "data.val_max_samples: null in verl, the mfsdp default stays" not in notes
    assert (
        "data.val_max_samples: verl's data.val_max_samples=0 is every row: null here,"
        " mfsdp's default"
    ) in notes, notes
