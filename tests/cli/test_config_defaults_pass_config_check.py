"""`mfsdp config defaults TRAINER`, with only data.train_files set, passes `mfsdp config
check`: GRPO's printed lengths were verl's defaults (512 + 512), past the 512 tokens of the
default model (model.shape=tiny), and the file its --help starts a run from was refused.
The lengths are printed to fit that model, in proportion, and a comment gives their
defaults; every other key is printed at its default, and the config classes keep verl's."""

from __future__ import annotations

import dataclasses

import pytest

from cli.config_check import check_config
from tests.support.grpo import write_rl_rows
from tests.support.interop_layouts import run_cli
from tests.support.sft import write_chat_jsonl
from trainer.config import SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.prerequisites import context_limit, shape_config_fields


def defaults_text(trainer: str) -> str:
    """What `mfsdp config defaults TRAINER` prints."""
    code, out, err = run_cli("config", "defaults", trainer)
    assert code == 0, err
    return out


@pytest.mark.parametrize("trainer", ["sft", "grpo"])
def test_the_defaults_printed_pass_the_check_with_data_set(trainer, tmp_path):
    written = tmp_path / f"{trainer}.yaml"
    written.write_text(defaults_text(trainer))
    rows = (write_rl_rows if trainer == "grpo" else write_chat_jsonl)(tmp_path / "rows.jsonl")
    check_config(
        trainer, str(written), [f"data.train_files=[{rows}]", f"trainer.run_dir={tmp_path}/run"]
    )


def test_grpo_lengths_fit_the_default_shape_and_the_rest_are_defaults(tmp_path):
    written = tmp_path / "grpo.yaml"
    text = defaults_text("grpo")
    written.write_text(text)
    printed, default = load_config(GRPOConfig, written), GRPOConfig()
    tokens = context_limit(shape_config_fields(default.model.shape)).tokens
    prompt, response = printed.data.max_prompt_length, printed.rollout.max_response_length
    assert prompt + response == tokens and prompt == response  # verl's are equal too
    fitted = dataclasses.replace(
        default,
        data=dataclasses.replace(default.data, max_prompt_length=prompt),
        rollout=dataclasses.replace(default.rollout, max_response_length=response),
    )
    assert printed == fitted
    verl = (default.data.max_prompt_length, default.rollout.max_response_length)
    said = f"(their defaults, verl's, {verl[0]} + {verl[1]}"
    assert text.splitlines()[1].startswith("# data.max_prompt_length + rollout.max_response_length")
    assert said in text.splitlines()[1]


def test_sft_defaults_are_every_key_at_its_default(tmp_path):
    written = tmp_path / "sft.yaml"
    written.write_text(defaults_text("sft"))
    assert load_config(SFTConfig, written) == SFTConfig()
