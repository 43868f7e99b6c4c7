"""verl RL rows that need a feature the single-turn rollout here lacks are refused naming
file, row and key, by train's loader and by `mfsdp config check` in every train and val
file: a gsm8k_multiturn_w_tool / _w_interaction table (`extra_info.need_tools_kwargs`,
`tools_kwargs`, `interaction_kwargs`) trained single-turn, its policy asked to call a tool
it was never offered; geo3k rows without their `images` trained on a literal `<image>`.
Both said ok and exited 0. False, null and empty values, and text that only mentions an
image, are nothing to refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.data_tables import read_rows, write_parquet
from tests.support.grpo import write_rl_rows
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

TOOLS = {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "3"}}}
TOOL_ROWS = {  # extra_info of verl's tool and interaction tables, and the key refused
    "need_tools_kwargs": ({"need_tools_kwargs": True, "tools_kwargs": TOOLS}, "need_tools_kwargs"),
    "tools_kwargs": ({"tools_kwargs": TOOLS}, "tools_kwargs"),
    "tools_kwargs as text": ({"tools_kwargs": json.dumps(TOOLS)}, "tools_kwargs"),
    "interaction_kwargs": ({"interaction_kwargs": {"query": "q"}}, "interaction_kwargs"),
}
NOTHING = [  # extra_info asking for no tool
    {"need_tools_kwargs": False, "tools_kwargs": {}, "interaction_kwargs": {}},
    {"need_tools_kwargs": None, "tools_kwargs": None, "interaction_kwargs": None},
    {"tools_kwargs": "{}", "interaction_kwargs": "null"},
    {"tools_kwargs": {"calc_gsm8k_reward": None}},  # a parquet struct unified across rows
]
# lengths the tiny model takes
SMALL = ("data.max_prompt_length=32", "rollout.max_response_length=16")


def _rows(tmp_path: Path, **change: Any) -> list[dict]:
    return [{**row, **change} for row in read_rows(str(write_rl_rows(tmp_path / "r.jsonl")))]


def _write(rows: list[dict], path: Path) -> Path:
    if path.suffix == ".parquet":
        return write_parquet(rows, path)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _refusals(path: Path, tmp_path: Path, good: Path) -> list[str]:
    """The refusal of train's loader and of config check, `path` a later val file."""
    said = []
    for load in (
        lambda: load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer()),
        lambda: check_config(
            "grpo",
            None,
            [
                f"data.train_files=[{good}]",
                f"data.val_files=[{good},{path}]",
                "data.val_max_samples=5",  # the second val file's rows are left to train
                *SMALL,
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
    path = _write(_rows(tmp_path, extra_info={"index": 0, **extra_info}), tmp_path / f"t{suffix}")
    where = f"{path}:1" if suffix == ".jsonl" else f"{path} row 1"
    for said in _refusals(path, tmp_path, good):
        assert said.startswith(f"{where}: extra_info.{key}: multi-turn tool/interaction")
        assert "not supported" in said and "\n" not in said


@pytest.mark.parametrize("extra_info", NOTHING)
def test_extra_info_asking_for_no_tool_trains(tmp_path, extra_info):
    path = _write(_rows(tmp_path, extra_info={"index": 0, **extra_info}), tmp_path / "t.jsonl")
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert len(prompts) == 8
    check_config("grpo", None, [f"data.train_files={path}", *SMALL, f"trainer.run_dir={tmp_path}"])


@pytest.mark.parametrize("token", ["<image>", "<video>"])
@pytest.mark.parametrize("prompt", ["turns", "text"])
def test_a_media_placeholder_without_its_media_is_refused(tmp_path, token, prompt):
    text = f"{token}Find x in the figure."
    cell: Any = text if prompt == "text" else [{"role": "user", "content": text}]
    good = write_rl_rows(tmp_path / "good.jsonl")
    path = _write(_rows(tmp_path, prompt=cell), tmp_path / "geo3k.parquet")
    column = {"<image>": "images", "<video>": "videos"}[token]
    for said in _refusals(path, tmp_path, good):
        assert said.startswith(
            f"{path} row 1: 'prompt' holds verl's placeholder '{token}' with no {column} in"
        )


@pytest.mark.parametrize(
    "text", ["Name the <img> tag.", "An image of <images>.", "Write <Image> or < image >."]
)
def test_a_prompt_mentioning_images_otherwise_trains(tmp_path, text):
    path = _write(_rows(tmp_path, prompt=[{"role": "user", "content": text}]), tmp_path / "t.jsonl")
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert len(prompts) == 8
