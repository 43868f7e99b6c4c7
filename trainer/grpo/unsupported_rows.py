"""verl RL rows whose task needs a feature the rollout here lacks, refused naming the file,
row and key: they trained as a silently different task.

- Tool and interaction rows (verl's gsm8k_multiturn_w_tool / _w_interaction tables):
  `extra_info.need_tools_kwargs` true as verl reads it (any truthy value: `1` and the
  text "true" too), or a `tools_kwargs` / `interaction_kwargs` holding a value. Their
  system prompt asks the policy to call a tool it is never offered: the rollout here is
  single-turn, as the refusal of verl's `multi_turn.*` keys says (docs/verl.md). False,
  null and empty values (`holds_nothing`, a dict of nothing too) ask for nothing.
- Prompts holding verl's multimodal placeholders (`<image>`, `<video>`: the exact tokens
  verl's RLHFDataset splits a prompt's text at to place each image or video) where verl's
  multimodal tables put them, in a row without its media column (`media_columns.py`
  refuses a row with one): at the start of a turn's text (geo3k's prompt is its problem,
  "<image>Find x ...", then the instruction) or alone on a line of it. The policy was
  asked "<image>Find x" with no figure. A token inside a sentence ("a <video> element",
  HTML and SVG prompts) is text, and so is a mention such as `<img>` or "image".

`unsupported_row` needs no tokenizer: `load_rl_prompts` runs it on every row, and
`mfsdp config check` on the first row of every train and val file.
"""

from __future__ import annotations

import re
from typing import Any

from trainer.data.empty_cells import holds_nothing

# extra_info keys verl's tool and interaction rollouts read; a value in one needs them
TOOL_KEYS = ("tools_kwargs", "interaction_kwargs")
# the placeholder token verl's RLHFDataset expands, and the media column it stands for
PLACEHOLDERS = {"<image>": "images", "<video>": "videos"}
# where verl's multimodal rows put one: first in the text, or alone on a line
_PLACED = re.compile(r"\A\s*(<image>|<video>)|^[ \t]*(<image>|<video>)[ \t]*$", re.MULTILINE)


def unsupported_row(row: dict[str, Any], prompt_key: str) -> str | None:
    """Why the RL `row` (read through `prompt_key` and `extra_info`) trains as another task
    here, or None: a tool or interaction row, or a prompt with a media placeholder."""
    return _tool_key(row.get("extra_info")) or _placeholder(row.get(prompt_key), prompt_key)


def _tool_key(extra_info: Any) -> str | None:
    if not isinstance(extra_info, dict):
        return None
    flag = extra_info.get("need_tools_kwargs")
    needs = not holds_nothing(flag) and bool(flag)  # as verl tests it: 1 and "true" too
    held = [key for key in TOOL_KEYS if not holds_nothing(extra_info.get(key), nested=True)]
    if not needs and not held:
        return None
    key = "need_tools_kwargs" if needs else held[0]
    return (
        f"extra_info.{key}: multi-turn tool/interaction rollouts are not supported (the"
        " rollout here is single-turn: the policy would be asked to use tools it is never"
        " offered, as verl's multi_turn.* keys are refused); drop the row's tools_kwargs,"
        " interaction_kwargs and need_tools_kwargs, and any prompt text asking for a tool"
    )


def _placeholder(prompt: Any, prompt_key: str) -> str | None:
    for text in _prompt_texts(prompt):
        if placed := _PLACED.search(text):
            token = placed.group(1) or placed.group(2)
            column = PLACEHOLDERS[token]
            return (
                f"'{prompt_key}' holds verl's placeholder '{token}' with no {column} in"
                f" the row (no '{column}' column, or an empty one), where verl's multimodal"
                " rows put it (first in a turn, or alone on a line): multimodal rows are"
                " not supported, the models trained here read text alone (the prompt would"
                f" train without its {column}); remove the placeholder to train on the"
                " text, or, if it is meant as text, put words before it on its line"
            )
    return None


def _prompt_texts(prompt: Any) -> list[str]:
    """The texts of a prompt cell: bare text, or each turn's text `content` (a malformed
    prompt is refused by `checked_prompt_row`)."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, (list, tuple)):
        return [
            turn["content"]
            for turn in prompt
            if isinstance(turn, dict) and isinstance(turn.get("content"), str)
        ]
    return []
