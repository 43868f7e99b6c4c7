"""verl RL rows that need a feature the single-turn rollout here lacks are refused naming
file, row and key, by train's loader and by `mfsdp config check` in every train and val
file: a gsm8k_multiturn_w_tool / _w_interaction table (`extra_info.need_tools_kwargs`,
`tools_kwargs`, `interaction_kwargs`) trained single-turn, its policy asked to call a tool
it was never offered; geo3k rows without their `images` trained on a literal `<image>`.
Both said ok and exited 0. False, null and empty values (as JSON text of any length too),
and text that mentions an image or video tag other than verl's exact tokens, are nothing to
refuse. Config check reads the rows train reads: not a val file past the first
under `data.val_max_samples` (it refused a config train ran), and a parquet file whose
first row group is large too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.data_tables import write_parquet
from tests.support.grpo import SMALL_LENGTHS, changed_rl_rows, write_rl_rows, write_rl_table
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

TOOLS = {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "3"}}}
NAMED = "'calc_gsm8k_reward', each a tool verl offers the policy; "
TOOL_ROWS = {  # extra_info of verl's tool and interaction tables, and what the refusal says
    "need_tools_kwargs": (
        {"need_tools_kwargs": True, "tools_kwargs": TOOLS},
        "need_tools_kwargs is True",
    ),
    "tools_kwargs": ({"tools_kwargs": TOOLS}, f"tools_kwargs: it names {NAMED}"),
    "tools_kwargs as text": (
        {"tools_kwargs": json.dumps(TOOLS)},
        f"tools_kwargs: it names {NAMED}",
    ),
    # verl offers each key of tools_kwargs, whatever its kwargs hold
    "a tool taking no kwargs": (
        {"tools_kwargs": '{"code_interpreter": {}}'},
        "tools_kwargs: it names 'code_interpreter', each a tool verl offers the policy; ",
    ),
    "a tool of null kwargs": (
        {"need_tools_kwargs": 0, "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": None}}},
        f"tools_kwargs: it names {NAMED}",
    ),
    "tools_kwargs of other text": ({"tools_kwargs": "calc_gsm8k_reward"}, "tools_kwargs: multi"),
    "interaction_kwargs": ({"interaction_kwargs": {"query": "q"}}, "interaction_kwargs"),
    "need_tools_kwargs 1": ({"need_tools_kwargs": 1}, "need_tools_kwargs is 1"),  # verl: truthy
    "need_tools_kwargs text": ({"need_tools_kwargs": "true"}, "need_tools_kwargs is 'true'"),
}
NOTHING = [  # extra_info asking for no tool
    {"need_tools_kwargs": False, "tools_kwargs": {}, "interaction_kwargs": {}},
    {"need_tools_kwargs": None, "tools_kwargs": None, "interaction_kwargs": None},
    {"tools_kwargs": "{}", "interaction_kwargs": "null"},
    {"tools_kwargs": {"calc_gsm8k_reward": None}},  # a parquet struct unified across rows
    {"tools_kwargs": '{"calc_gsm8k_reward": null}'},  # the same as text (over 16 characters)
    {"tools_kwargs": '{"calc_gsm8k_reward": null, "code_interpreter": null}'},
]


def _refusals(path: Path, tmp_path: Path, good: Path) -> list[str]:
    """The refusal of train's loader and of config check, `path` the first val file."""
    said = []
    for load in (
        lambda: load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer()),
        lambda: check_config(
            "grpo",
            None,
            [
                f"data.train_files=[{good}]",
                f"data.val_files=[{path},{good}]",
                "data.val_max_samples=5",  # the first val file: train reads its rows
                *SMALL_LENGTHS,
                f"trainer.run_dir={tmp_path / 'run'}",
            ],
        ),
    ):
        with pytest.raises(MfsdpError) as caught:
            load()
        assert caught.value.exit_code == 2
        said.append(str(caught.value))
    return said


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.parametrize("kind", list(TOOL_ROWS))
def test_a_tool_or_interaction_row_is_refused_naming_file_row_and_key(tmp_path, kind, suffix):
    extra_info, key = TOOL_ROWS[kind]
    good = write_rl_rows(tmp_path / "good.jsonl")
    path = write_rl_table(
        changed_rl_rows(tmp_path, extra_info={"index": 0, **extra_info}), tmp_path / f"t{suffix}"
    )
    where = f"{path}:1" if suffix == ".jsonl" else f"{path} row 1"
    for said in _refusals(path, tmp_path, good):
        assert said.startswith(f"{where}: extra_info.{key}"), said
        assert "multi-turn tool/interaction rollouts are not supported" in said
        assert "\n" not in said


@pytest.mark.parametrize("extra_info", NOTHING)
def test_extra_info_asking_for_no_tool_trains(tmp_path, extra_info):
    path = write_rl_table(
        changed_rl_rows(tmp_path, extra_info={"index": 0, **extra_info}), tmp_path / "t.jsonl"
    )
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert len(prompts) == 8
    check_config(
        "grpo", None, [f"data.train_files={path}", *SMALL_LENGTHS, f"trainer.run_dir={tmp_path}"]
    )


@pytest.mark.parametrize("token", ["<image>", "<video>"])
@pytest.mark.parametrize(
    "text",
    [
        "{}Find x in the figure.",
        "  {}\nFind x in the figure.",
        "Look:\n {} \nFind x.",
        "What is N + 3 in the figure below? {}",
        "Question: {} What is N + 3?",
    ],
    ids=["first", "first-line", "own-line", "last", "mid"],
)
@pytest.mark.parametrize("prompt", ["turns", "text"])
def test_a_media_placeholder_without_its_media_is_refused(tmp_path, token, text, prompt):
    """Wherever it is: verl's multimodal rows put it anywhere in a turn's text, and its
    processor expands every one with the row's media, dropped from this table."""
    text = text.format(token)
    cell: Any = text if prompt == "text" else [{"role": "user", "content": text}]
    good = write_rl_rows(tmp_path / "good.jsonl")
    path = write_rl_table(changed_rl_rows(tmp_path, prompt=cell), tmp_path / "geo3k.parquet")
    column = {"<image>": "images", "<video>": "videos"}[token]
    for said in _refusals(path, tmp_path, good):
        assert said.startswith(
            f"{path} row 1: 'prompt' holds verl's placeholder '{token}' with no {column} in"
        )
        assert f"guards a table whose {column} were dropped" in said, said
        assert "if the table means it as text, set data.placeholders_as_text=true" in said


@pytest.mark.parametrize(
    "turns",
    [
        [{"role": "user", "content": "Name the <img> tag."}],
        [{"role": "user", "content": "An image of <images>."}],
        [{"role": "user", "content": "Write <Image> or < image >."}],
        [{"role": "user", "content": "Write a <VIDEO> tag."}],
    ],
    ids=["img", "images", "Image", "VIDEO"],
)
def test_a_prompt_mentioning_images_otherwise_trains(tmp_path, turns):
    path = write_rl_table(changed_rl_rows(tmp_path, prompt=turns), tmp_path / "t.jsonl")
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert len(prompts) == 8
    check_config(
        "grpo", None, [f"data.train_files={path}", *SMALL_LENGTHS, f"trainer.run_dir={tmp_path}"]
    )


def test_a_val_file_train_does_not_read_is_not_refused_by_config_check(tmp_path):
    """Under data.val_max_samples train reads the first N val rows: a later val file's tool
    rows are never read, so config check says ok as train runs; without it both refuse."""
    good = write_rl_rows(tmp_path / "good.jsonl")  # 8 rows
    tools = write_rl_table(
        changed_rl_rows(tmp_path, extra_info={"index": 0, **TOOL_ROWS["tools_kwargs"][0]}),
        tmp_path / "tool.jsonl",
    )
    files = [str(good), str(tools)]
    prompts, _ = load_rl_prompts(files, RLDataConfig(), build_tokenizer(), limit=5)
    assert len(prompts) == 5
    args = [f"data.train_files={good}", f"data.val_files=[{good},{tools}]", *SMALL_LENGTHS]
    check_config("grpo", None, [*args, "data.val_max_samples=5", f"trainer.run_dir={tmp_path}"])
    with pytest.raises(MfsdpError, match=rf"^{tools}:1: extra_info.tools_kwargs: "):
        load_rl_prompts(files, RLDataConfig(), build_tokenizer())
    with pytest.raises(MfsdpError, match=rf"^{tools}:1: extra_info.tools_kwargs: "):
        check_config("grpo", None, [*args, f"trainer.run_dir={tmp_path}"])


def test_a_tool_row_in_a_parquet_of_one_large_row_group_is_refused(tmp_path):
    """A first row group over a batch of train's reader (pyarrow's default is 1M rows) was
    passed over by config check; its first row's two columns are read within the budget."""
    row = changed_rl_rows(tmp_path, extra_info={"index": 0, **TOOL_ROWS["tools_kwargs"][0]})[0]
    path = write_parquet([row] * 20_000, tmp_path / "big.parquet")
    with pytest.raises(MfsdpError, match=rf"^{path} row 1: extra_info.tools_kwargs: "):
        check_config(
            "grpo",
            None,
            [f"data.train_files={path}", *SMALL_LENGTHS, f"trainer.run_dir={tmp_path}"],
        )


def test_config_check_names_the_train_row_train_names_first(tmp_path):
    """A malformed first train row and a tool row in a val file: train stops at the train
    row, and so does config check (it named the val file)."""
    bad = write_rl_table(changed_rl_rows(tmp_path, prompt=5), tmp_path / "bad.jsonl")
    tools = write_rl_table(
        changed_rl_rows(tmp_path, extra_info={"index": 0, **TOOL_ROWS["tools_kwargs"][0]}),
        tmp_path / "tool.jsonl",
    )
    with pytest.raises(MfsdpError) as train:
        load_rl_prompts([str(bad)], RLDataConfig(), build_tokenizer())
    with pytest.raises(MfsdpError) as check:
        check_config(
            "grpo",
            None,
            [
                f"data.train_files={bad}",
                f"data.val_files={tools}",
                *SMALL_LENGTHS,
                f"trainer.run_dir={tmp_path}",
            ],
        )
    assert str(train.value).startswith(f"{bad}:1: ")
    assert str(check.value) == str(train.value)
