"""verl's `custom_reward_function.reward_kwargs` is `reward.kwargs` here: keyword arguments
given to every call of the custom reward function, over its four where a name is the same
(verl/trainer/ppo/reward.py `get_custom_reward_fn`, `_call_with_kwargs`). It was refused as
"unknown config key 'custom_reward_function'", the section whose `.path` had just been read;
a verl key of such a section that no rule maps is now named whole."""

import json
import re

import pytest
import yaml

from mfsdp_ckpt.errors import EXIT_USAGE
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.paths import REPO
from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig
from trainer.rewards.custom import RewardError
from trainer.rewards.dispatch import RewardScorer
from trainer.verl_import import convert_verl

KEYWORD_REWARD = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
    "    return float(kwargs.get('bonus', 0.0))\n"
)


def _reward(tmp_path, text: str = KEYWORD_REWARD) -> str:
    path = tmp_path / "kw_reward.py"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("section", ["custom_reward_function", "reward.custom_reward_function"])
def test_verls_reward_kwargs_on_the_command_line_are_reward_kwargs(section):
    cfg = load_config(
        GRPOConfig,
        None,
        [
            f"{section}.path=r.py",
            f"+{section}.reward_kwargs.bonus=0.5",
            f"+{section}.reward_kwargs.mode=strict",
            f"+{section}.reward_kwargs.limits.a=1",
            f"+{section}.reward_kwargs.limits.b=2",
        ],
    )
    assert cfg.reward.path == "r.py"
    assert cfg.reward.kwargs == {"bonus": 0.5, "mode": "strict", "limits": {"a": 1, "b": 2}}


def test_verls_reward_kwargs_in_a_file_merge_with_the_command_lines(tmp_path):
    config = tmp_path / "verl.yaml"
    section = {"path": "r.py", "name": "compute_score", "reward_kwargs": {"bonus": 0.5}}
    config.write_text(yaml.safe_dump({"custom_reward_function": section}))
    cfg = load_config(GRPOConfig, config, ["+custom_reward_function.reward_kwargs.scale=2"])
    assert cfg.reward.kwargs == {"bonus": 0.5, "scale": 2}
    assert load_config(GRPOConfig, None, ["reward.path=r.py"]).reward.kwargs == {}


def test_mfsdp_config_from_verl_carries_reward_kwargs(tmp_path):
    config = tmp_path / "verl.yaml"
    section = {"path": "r.py", "reward_kwargs": {"bonus": 0.5, "cfg": {"a": [1, 2]}}}
    config.write_text(yaml.safe_dump({"custom_reward_function": section}))
    conversion = convert_verl(config, "grpo")
    assert conversion.tree["reward"]["kwargs"] == {"bonus": 0.5, "cfg": {"a": [1, 2]}}
    assert not [item for item in conversion.dropped if "reward_kwargs" in item]


def test_reward_kwargs_without_a_reward_path_are_refused_in_one_line():
    for override in ("reward.kwargs.bonus=0.5", "+custom_reward_function.reward_kwargs.bonus=1"):
        with pytest.raises(ConfigError) as err:
            load_config(GRPOConfig, None, [override])
        assert str(err.value).startswith("reward.kwargs (bonus) without reward.path:"), err.value
        assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "override, said",
    [
        (
            "custom_reward_function.reward_kwargs=5",
            "verl key 'custom_reward_function.reward_kwargs=5' has no equivalent here:"
            " reward_kwargs is a mapping",
        ),
        ("reward.kwargs=[1]", "config key 'reward.kwargs' expects a mapping"),
    ],
)
def test_reward_kwargs_that_are_no_mapping_are_refused_naming_the_key(override, said):
    with pytest.raises(ConfigError, match="^command-line override: " + re.escape(said)):
        load_config(GRPOConfig, None, ["reward.path=r.py", override])


def test_reward_kwargs_keys_that_are_no_text_are_refused(tmp_path):
    config = tmp_path / "grpo.yaml"
    config.write_text("reward:\n  path: r.py\n  kwargs: {1: 2}\n")
    with pytest.raises(ConfigError, match=r"config key 'reward\.kwargs' has the int key 1"):
        load_config(GRPOConfig, config)


@pytest.mark.parametrize(
    "key",
    [
        "custom_reward_function.no_such_key",
        "+custom_reward_function.reward_kwarg.bonus",
        "reward.custom_reward_function.no_such_key",
    ],
)
def test_a_verl_key_of_the_section_that_no_rule_maps_is_named_whole(key):
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, None, ["reward.path=r.py", f"{key}=1"])
    said = f"command-line override: verl key '{key.lstrip('+')}' is not one mfsdp maps"
    assert str(err.value).startswith(said), err.value
    # verl's "not set" of such a key changes nothing, as under actor_rollout_ref
    load_config(GRPOConfig, None, ["reward.path=r.py", f"{key}=null"])


def test_mfsdps_own_reward_section_keeps_the_loaders_advice():
    with pytest.raises(
        ConfigError, match=r"unknown config key 'reward\.pth'; did you mean reward\.path"
    ):
        load_config(GRPOConfig, None, ["reward.pth=r.py"])


def test_each_call_gets_the_kwargs_over_verls_four_keywords(tmp_path):
    path = _reward(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info, bonus, seen):\n"
        "    seen.append(solution_str)\n"  # a copy for each call: nothing carries over
        "    return {'score': bonus + len(seen), 'acc': float(ground_truth == 'given')}\n",
    )
    kwargs = {"bonus": 0.5, "seen": [], "ground_truth": "given"}
    scores = RewardScorer(path, kwargs=kwargs)(["s", "s"], ["a", "b"], ["7", "8"])
    assert scores.rewards == [1.5, 1.5]
    assert scores.accuracy == [1.0, 1.0]  # reward.kwargs win over the row's, as in verl
    assert kwargs["seen"] == []


def test_a_function_that_cannot_take_the_kwargs_is_refused_when_loaded(tmp_path):
    path = _reward(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 1.0\n",
    )
    with pytest.raises(RewardError) as err:
        RewardScorer(path, kwargs={"bonus": 0.5})
    assert "extra_info=..., bonus=...) (verl's reward signature with reward.kwargs)" in str(
        err.value
    )
    assert "unexpected keyword argument 'bonus'" in str(err.value)


def _one_step(tmp_path, *overrides: str) -> tuple[int, str, str]:
    from trainer.grpo.synthetic import write_addition_data

    files = write_addition_data(tmp_path / "data", digits=4)
    return run_cli(
        *("train", "grpo", "--config", REPO / "examples" / "grpo_tiny_cpu.yaml", "--json"),
        *(f"data.train_files={files['rl_train']}", f"trainer.run_dir={tmp_path / 'run'}"),
        *("data.val_files=[]", "trainer.total_steps=1", "data.train_batch_size=2"),
        *("rollout.n=2", "rollout.max_response_length=2", "actor.ppo_mini_batch_size=2"),
        *("actor.ppo_micro_batch_size_per_gpu=2", "actor.log_prob_micro_batch_size_per_gpu=2"),
        *overrides,
    )


def test_a_verl_command_lines_reward_kwargs_reach_the_function_in_a_run(tmp_path):
    code, out, err = _one_step(
        tmp_path,
        f"custom_reward_function.path={_reward(tmp_path)}",
        "+custom_reward_function.reward_kwargs.bonus=0.5",
    )
    assert code == 0, err
    assert json.loads(out)["reward_mean"] == 0.5


def test_a_run_with_reward_kwargs_and_no_reward_path_stops_before_it_starts(tmp_path):
    code, _out, err = _one_step(tmp_path, "reward.kwargs.bonus=0.5")
    assert code == EXIT_USAGE
    one_error(err, "reward.kwargs (bonus) without reward.path")
