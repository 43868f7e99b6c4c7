"""verl RL rows train here only as verl would read them, refused by train's loader and by
`mfsdp config check` alike (one line naming file, row and column, exit 2).

Were: a gsm8k_multiturn_w_tool row whose `extra_info` was JSON text or a parquet map was
refused for its tools only with `reward.path`; with the built-in reward it trained
single-turn (exit 0), its prompt asking for a tool never offered, though verl stops on such
an `extra_info` before training. A row naming a verl agent loop (`agent_name: tool_agent`,
or a custom agent) trained single-turn too, while `rollout.agent.default_agent_loop=
tool_agent` was refused. A search_r1 row (dict ground truth, tools) was first refused for
its ground truth with a remedy (write a reward function), and for its tools only after."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.data_tables import write_parquet
from tests.support.grpo import SMALL_LENGTHS, changed_rl_rows, write_rl_table
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

# extra_info of verl's gsm8k_multiturn_w_tool.py rows
TOOL_INFO = {
    "split": "train",
    "index": 0,
    "need_tools_kwargs": True,
    "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "3"}}},
}
TOOL_LINE = "extra_info.need_tools_kwargs is {}: multi-turn tool/interaction rollouts"


def _write_map(rows: list[dict], info: dict, path: Path) -> Path:
    """`rows` with `info` as each row's extra_info, a parquet map<string, string> column (a
    value not text as JSON text)."""
    pairs = [(key, v if isinstance(v, str) else json.dumps(v)) for key, v in info.items()]
    table = pa.Table.from_pylist([{k: v for k, v in r.items() if k != "extra_info"} for r in rows])
    column = pa.array([pairs] * len(rows), type=pa.map_(pa.string(), pa.string()))
    pq.write_table(table.append_column("extra_info", column), path)
    return path


def _refusals(path: Path, tmp_path: Path, *overrides: str) -> list[str]:
    """The refusal of train's loader and of config check for `path`, built-in reward unless
    `overrides` set one."""
    custom = any(o.startswith("reward.path=") for o in overrides)
    said = []
    for load in (
        lambda: load_rl_prompts(
            [str(path)], RLDataConfig(), build_tokenizer(), custom_reward=custom
        ),
        lambda: check_config(
            "grpo",
            None,
            [
                f"data.train_files={path}",
                *SMALL_LENGTHS,
                f"trainer.run_dir={tmp_path / 'run'}",
                *overrides,
            ],
        ),
    ):
        with pytest.raises(MfsdpError) as caught:
            load()
        assert caught.value.exit_code == 2
        assert "\n" not in str(caught.value)
        said.append(str(caught.value))
    return said


def _reward_file(tmp_path: Path) -> str:
    file = tmp_path / "reward.py"
    file.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 0.0\n"
    )
    return f"reward.path={file}"


@pytest.mark.parametrize("reward", ["built-in", "custom"])
@pytest.mark.parametrize("form", ["json text", "json text parquet", "parquet map"])
def test_a_tool_row_is_refused_for_its_tools_whatever_its_extra_infos_form(tmp_path, form, reward):
    rows = changed_rl_rows(tmp_path)
    if form == "parquet map":
        path, flag = _write_map(rows, TOOL_INFO, tmp_path / "t.parquet"), "'true'"
    else:
        suffix = ".parquet" if "parquet" in form else ".jsonl"
        text = [{**row, "extra_info": json.dumps(TOOL_INFO)} for row in rows]
        path, flag = write_rl_table(text, tmp_path / f"t{suffix}"), "True"
    where = f"{path}:1" if path.suffix == ".jsonl" else f"{path} row 1"
    overrides = [_reward_file(tmp_path)] if reward == "custom" else []
    for said in _refusals(path, tmp_path, *overrides):
        assert said.startswith(f"{where}: {TOOL_LINE.format(flag)}"), said


@pytest.mark.parametrize(
    ("extra_info", "shown"),
    [
        (json.dumps({"split": "train", "index": 0}), 'str \'{"split": "train", "index": 0}\''),
        ("row 2", "str 'row 2'"),
        ([1, 2], "list [1, 2]"),
        (7, "int 7"),
    ],
)
def test_an_extra_info_verl_cannot_read_is_refused_with_the_built_in_reward(
    tmp_path, extra_info, shown
):
    path = write_rl_table(changed_rl_rows(tmp_path, extra_info=extra_info), tmp_path / "t.jsonl")
    for said in _refusals(path, tmp_path):
        assert said == (
            f"{path}:1: extra_info is {shown}: verl reads every row's extra_info as a dict and"
            " stops on anything else, and a reward function is given it as one; write it as a"
            " struct (a JSON object), or leave it out or null for {}"
        )


def test_an_extra_info_map_without_tools_is_refused_as_verl_cannot_read_it(tmp_path):
    path = _write_map(
        changed_rl_rows(tmp_path), {"split": "train", "index": 0}, tmp_path / "t.parquet"
    )
    for said in _refusals(path, tmp_path):
        assert said.startswith(f"{path} row 1: extra_info is list [('split', 'train'),"), said


@pytest.mark.parametrize("agent", ["tool_agent", "my_react_agent", ""])
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_row_naming_an_agent_loop_is_refused(tmp_path, agent, suffix):
    path = write_rl_table(changed_rl_rows(tmp_path, agent_name=agent), tmp_path / f"t{suffix}")
    where = f"{path}:1" if suffix == ".jsonl" else f"{path} row 1"
    for said in _refusals(path, tmp_path):
        assert said.startswith(
            f"{where}: agent_name is {agent!r}: verl's agent loops are not supported (the"
            " rollout here is single-turn"
        ), said
        assert "rollout.agent.default_agent_loop other than single_turn_agent" in said


@pytest.mark.parametrize("agent", [None, "single_turn_agent"])
def test_a_row_of_the_single_turn_agent_trains(tmp_path, agent):
    path = write_rl_table(changed_rl_rows(tmp_path, agent_name=agent), tmp_path / "t.parquet")
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert len(prompts) == 8
    check_config(
        "grpo", None, [f"data.train_files={path}", *SMALL_LENGTHS, f"trainer.run_dir={tmp_path}"]
    )


@pytest.mark.parametrize("with_reward", [False, True])
def test_a_search_r1_row_is_refused_for_its_tools_first(tmp_path, with_reward):
    """preprocess_search_r1_dataset.py's layout: no reward function makes it train, so no
    refusal offering one comes first."""
    search = {"create_kwargs": {"ground_truth": {"target": ["Elvis"]}, "question": "who"}}
    info = {"index": 0, "need_tools_kwargs": True, "tools_kwargs": {"search": search}}
    rows = changed_rl_rows(
        tmp_path,
        data_source="searchR1_nq",
        reward_model={"ground_truth": {"target": ["Elvis"]}, "style": "rule"},
        extra_info=info,
    )
    path = write_rl_table(rows, tmp_path / "search.parquet")
    overrides = [_reward_file(tmp_path)] if with_reward else []
    for said in _refusals(path, tmp_path, *overrides):
        assert said.startswith(f"{path} row 1: {TOOL_LINE.format('True')}"), said


def test_a_tool_row_as_text_in_a_parquet_of_one_large_row_group_is_refused(tmp_path):
    """Config check reads only the prompt and task columns of such a file's first row (its
    row group is over a batch of train's reader): the tool check reads JSON text there too."""
    row = {**changed_rl_rows(tmp_path)[0], "extra_info": json.dumps(TOOL_INFO)}
    path = write_parquet([row] * 20_000, tmp_path / "big.parquet")
    with pytest.raises(MfsdpError) as caught:
        check_config(
            "grpo",
            None,
            [f"data.train_files={path}", *SMALL_LENGTHS, f"trainer.run_dir={tmp_path}"],
        )
    assert str(caught.value).startswith(f"{path} row 1: {TOOL_LINE.format('True')}")


def test_an_agent_row_in_a_parquet_of_one_large_row_group_is_refused(tmp_path):
    """The first row of a large row group is read through its task columns, `agent_name`
    among them: config check refuses a tool-agent row as train does."""
    row = {**changed_rl_rows(tmp_path)[0], "agent_name": "tool_agent"}
    path = write_parquet([row] * 20_000, tmp_path / "big.parquet")
    with pytest.raises(MfsdpError) as caught:
        check_config(
            "grpo",
            None,
            [f"data.train_files={path}", *SMALL_LENGTHS, f"trainer.run_dir={tmp_path}"],
        )
    assert str(caught.value).startswith(f"{path} row 1: agent_name is 'tool_agent'")
