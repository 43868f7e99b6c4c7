"""verl's RLHFDataset reads tool keys under `data.` (verl/utils/dataset/rl_dataset.py:
`need_tools_kwargs`, the default of each row's `extra_info.need_tools_kwargs`, given with
`+`; `tool_config_path` and `function_tool_path`, set from `rollout.multi_turn.*`). Were:
`+data.need_tools_kwargs=true` was an unknown key, "did you mean data.mm_processor_kwargs",
and `rollout.multi_turn.function_tool_path` was ignored; each is refused as the tool rollout
it asks for, and accepted off."""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig

SINGLE_TURN = (
    "has no equivalent here: the rollout here is single-turn: one response per prompt,"
    " no tools, interactions or custom agent loops"
)


@pytest.mark.parametrize(
    "override",
    [
        "+data.need_tools_kwargs=true",
        "data.need_tools_kwargs=True",
        "data.tool_config_path=tools.yaml",
        "data.function_tool_path=tools.py",
        "actor_rollout_ref.rollout.multi_turn.function_tool_path=tools.py",
    ],
)
def test_a_verl_tool_key_is_refused_as_a_tool_rollout(override):
    with pytest.raises(ConfigError) as raised:
        load_config(GRPOConfig, None, [override])
    assert raised.value.exit_code == 2
    said = str(raised.value)
    assert SINGLE_TURN in said and "did you mean" not in said, said


@pytest.mark.parametrize(
    "override",
    [
        "+data.need_tools_kwargs=false",
        "data.function_tool_path=null",
        "actor_rollout_ref.rollout.multi_turn.function_tool_path=null",
    ],
)
def test_a_verl_tool_key_off_is_accepted(override):
    assert load_config(GRPOConfig, None, [override]) == GRPOConfig()
