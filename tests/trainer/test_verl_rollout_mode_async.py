"""verl has removed `actor_rollout_ref.rollout.mode=sync`: `async` (its agent loop over
server-mode engines) is its only mode, written by its current scripts and its generated
config (verl/trainer/config/rollout/rollout.yaml: `mode: async`; RolloutConfig refuses
"sync"). For single-turn GRPO it rolls out the policy of the last update, as the engine here
does in-process between updates, so both modes are accepted with a note; what does change
the rollout, multi-turn, tools, agent loops, is refused by the keys that switch it on."""

from __future__ import annotations

import logging

import pytest

from tests.support.verl_conversions import as_given
from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

ROLLOUT = "actor_rollout_ref.rollout."


def grpo(*overrides: str) -> GRPOConfig:
    return load_config(GRPOConfig, None, list(overrides))


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_both_modes_are_the_rollout_here(mode, caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        assert grpo(f"{ROLLOUT}mode={mode}") == GRPOConfig()
    assert any(
        f"verl's {ROLLOUT}mode is ignored: the engine here rolls out in-process between updates"
        in message
        for message in caplog.messages
    )


def test_a_script_in_async_mode_converts_whole(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        " actor_rollout_ref.rollout.mode=async"
        " actor_rollout_ref.rollout.agent.num_workers=4"
        " actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent"
        " actor_rollout_ref.rollout.n=4\n"
    )
    conversion = convert_verl(script)
    assert (conversion.dropped, as_given(conversion)) == (
        [],
        {"algorithm": {"adv_estimator": "grpo"}, "rollout": {"n": 4}},
    )


@pytest.mark.parametrize(
    "override",
    [
        "multi_turn.enable=True",
        "multi_turn.tool_config_path=tools.yaml",
        "multi_turn.interaction_config_path=interaction.yaml",
        "agent.default_agent_loop=tool_agent",
        "agent.agent_loop_config_path=loops.yaml",
    ],
)
def test_multi_turn_tools_and_agent_loops_are_refused(override):
    with pytest.raises(ConfigError, match="the rollout here is single-turn"):
        grpo(ROLLOUT + override)


def test_a_mode_verl_does_not_know_is_refused():
    with pytest.raises(ConfigError, match=r"rollout\.mode is async"):
        grpo(f"{ROLLOUT}mode=batch")
