"""verl's multimodal rows put `<image>` / `<video>` anywhere in a turn's text, not only first
or alone on a line, and its processor expands each with the row's media: "What is N + 3 in
the figure below? <image>" in a table whose images were dropped trained on a literal token and
no figure, exit 0. The exact tokens are refused wherever they are, in any turn, by train's
loader and by `mfsdp config check`, naming the key `data.placeholders_as_text`, with which a
table that means them as text (HTML, SVG prompts) trains them as written, as verl trains a row
with no media column. The refusal says so, never that verl expands the tokens in such a row.
`extra_info.need_tools_kwargs` written as text saying false ("false", "False", "0", "no")
asks for no tool, as its writer meant (verl trains such a row without tools); a flag that
does refuse is quoted in the message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.grpo import changed_rl_rows, write_rl_table
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

SMALL = ("data.max_prompt_length=48", "rollout.max_response_length=16")
AS_TEXT = {  # a table that means the tokens as text: no media column, verl trains them so
    "html": [{"role": "user", "content": "In HTML5, does a <video> element need a closing tag?"}],
    "svg": [{"role": "user", "content": "Explain the tag <image> in SVG."}],
    "system": [
        {"role": "system", "content": "Never output <image>."},
        {"role": "user", "content": "Draw a cat."},
    ],
}


def _file(tmp_path: Path, **change: Any) -> Path:
    return write_rl_table(changed_rl_rows(tmp_path, **change), tmp_path / "t.jsonl")


def _check(path: Path, tmp_path: Path, *extra: str) -> None:
    args = [f"data.train_files={path}", *SMALL, *extra, f"trainer.run_dir={tmp_path / 'run'}"]
    check_config("grpo", None, args)


@pytest.mark.parametrize("kind", list(AS_TEXT))
def test_a_placeholder_anywhere_is_refused_naming_the_key(tmp_path, kind):
    path = _file(tmp_path, prompt=AS_TEXT[kind])
    for load in (
        lambda: load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer()),
        lambda: _check(path, tmp_path),
    ):
        with pytest.raises(MfsdpError) as caught:
            load()
        said = str(caught.value)
        assert caught.value.exit_code == 2
        assert said.startswith(f"{path}:1: 'prompt' holds verl's placeholder '<"), said
        assert "set data.placeholders_as_text=true, which trains it as verl does" in said
        assert "verl trains it as literal text in a row with no media column" in said, said
        assert "wherever" not in said, said  # verl expands it only in a row with media


@pytest.mark.parametrize("kind", list(AS_TEXT))
def test_placeholders_as_text_trains_them_as_written(tmp_path, kind):
    turns = AS_TEXT[kind]
    path = _file(tmp_path, prompt=turns)
    data = RLDataConfig(placeholders_as_text=True)
    prompts, _ = load_rl_prompts([str(path)], data, build_tokenizer())
    assert len(prompts) == 8
    assert all(turn["content"] in prompts[0].prompt for turn in turns)  # as written
    _check(path, tmp_path, "data.placeholders_as_text=true")


def test_placeholders_as_text_still_refuses_a_tool_row(tmp_path):
    path = _file(tmp_path, extra_info={"index": 0, "tools_kwargs": {"calc": {"a": 1}}})
    wanted = r":1: extra_info.tools_kwargs: it names 'calc', .*; multi-turn tool"
    with pytest.raises(MfsdpError, match=wanted):
        load_rl_prompts([str(path)], RLDataConfig(placeholders_as_text=True), build_tokenizer())


@pytest.mark.parametrize("flag", ["false", "False", "0", "no", " FALSE "])
def test_need_tools_kwargs_text_saying_false_trains(tmp_path, flag):
    path = _file(tmp_path, extra_info={"index": 0, "need_tools_kwargs": flag})
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert len(prompts) == 8
    _check(path, tmp_path)


@pytest.mark.parametrize(("flag", "shown"), [("yes", "'yes'"), ("1", "'1'"), (2, "2")])
def test_need_tools_kwargs_that_refuses_is_quoted(tmp_path, flag, shown):
    path = _file(tmp_path, extra_info={"index": 0, "need_tools_kwargs": flag})
    wanted = rf"^{path}:1: extra_info.need_tools_kwargs is {shown}: multi-turn tool"
    with pytest.raises(MfsdpError, match=wanted):
        load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    with pytest.raises(MfsdpError, match=wanted):
        _check(path, tmp_path)
