"""verl RL rows whose task needs a feature the rollout here lacks, refused naming the file,
row and key: they trained as a silently different task.

- Tool and interaction rows (verl's gsm8k_multiturn_w_tool / _w_interaction tables):
  `extra_info.need_tools_kwargs` true as verl reads it (any truthy value: `1` and the
  text "true" too, but text saying false, `FALSE_TEXTS` in any case, is false as its
  writer meant: verl trains such a row without tools, its flag alone only warned), or a
  `tools_kwargs` / `interaction_kwargs` holding a value. Their
  system prompt asks the policy to call a tool it is never offered: the rollout here is
  single-turn, as the refusal of verl's `multi_turn.*` keys says (docs/verl.md). False,
  null and empty values (`holds_nothing`, a dict of nothing too) ask for nothing.
- Prompts holding verl's multimodal placeholders (`<image>`, `<video>`: the exact tokens
  verl's RLHFDataset splits a row's text at, every one of them, to place each image or
  video, where the row has an images or videos column; a row without one trains them as
  text) in a row without its media column (`media_columns.py` refuses a row with one),
  wherever in a turn's text: "<image>Find x" (geo3k) and "What is x in the figure below?
  <image>" alike were asked with no figure. A table meant as text (HTML or SVG prompts
  naming the tags) trains them as literal text with `data.placeholders_as_text`; a mention
  such as `<img>`, `<Image>` or "image" is no placeholder.

`unsupported_row` needs no tokenizer: `load_rl_prompts` runs it on every row, and
`mfsdp config check` on the first row of every train and val file.
"""

from __future__ import annotations

import re
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from trainer.data.empty_cells import holds_nothing

# extra_info keys verl's tool and interaction rollouts read; a value in one needs them
TOOL_KEYS = ("tools_kwargs", "interaction_kwargs")
# need_tools_kwargs written as text meaning false (lower-cased, stripped)
FALSE_TEXTS = frozenset({"false", "0", "no", "off"})
# the placeholder token verl's RLHFDataset expands, and the media column it stands for
PLACEHOLDERS = {"<image>": "images", "<video>": "videos"}
# verl splits a multimodal row's text at each of these, wherever it is (a row with no
# media column keeps them as text)
_PLACEHOLDER = re.compile("|".join(map(re.escape, PLACEHOLDERS)))
# the flag that trains them as text, named by the refusal
AS_TEXT_KEY = "data.placeholders_as_text"


def unsupported_row(
    row: dict[str, Any], prompt_key: str, *, placeholders_as_text: bool = False
) -> str | None:
    """Why the RL `row` (read through `prompt_key` and `extra_info`) trains as another task
    here, or None: a tool or interaction row, or a prompt with a media placeholder (unless
    `placeholders_as_text`, `data.placeholders_as_text`: the table means them as text)."""
    if why := _tool_key(row.get("extra_info")):
        return why
    return None if placeholders_as_text else _placeholder(row.get(prompt_key), prompt_key)


def _tool_key(extra_info: Any) -> str | None:
    if not isinstance(extra_info, dict):
        return None
    flag = extra_info.get("need_tools_kwargs")
    held = [key for key in TOOL_KEYS if not holds_nothing(extra_info.get(key), nested=True)]
    if _flag_set(flag):
        what = f"need_tools_kwargs is {cut_to(repr(flag), 40)}"
    elif held:
        what = held[0]
    else:
        return None
    return (
        f"extra_info.{what}: multi-turn tool/interaction rollouts are not supported (the"
        " rollout here is single-turn: the policy would be asked to use tools it is never"
        " offered, as verl's multi_turn.* keys are refused); drop the row's tools_kwargs,"
        " interaction_kwargs and need_tools_kwargs, and any prompt text asking for a tool"
    )


def _flag_set(flag: Any) -> bool:
    """Whether `need_tools_kwargs` asks for tools: truthy as verl tests it (1 and "true"
    too), save nothing (`holds_nothing`) and text saying false."""
    if isinstance(flag, str) and flag.strip().lower() in FALSE_TEXTS:
        return False
    return not holds_nothing(flag) and bool(flag)


def _placeholder(prompt: Any, prompt_key: str) -> str | None:
    for text in _prompt_texts(prompt):
        if placed := _PLACEHOLDER.search(text):
            token = placed.group()
            column = PLACEHOLDERS[token]
            return (
                f"'{prompt_key}' holds verl's placeholder '{token}' with no {column} in"
                f" the row (no '{column}' column, or an empty one): verl's multimodal rows"
                f" put it there and expand it with the row's {column}, so this refusal"
                f" guards a table whose {column} were dropped (geo3k's prompts would train"
                " without their figures; the models trained here read text alone); verl"
                " trains it as literal text in a row with no media column: if the table means"
                f" it as text, set {AS_TEXT_KEY}=true, which trains it as verl does, else"
                " remove the placeholder"
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
