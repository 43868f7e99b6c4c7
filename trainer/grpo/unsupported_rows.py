"""verl RL rows whose task needs a feature the rollout here lacks, refused naming the file,
row and key: they trained as a silently different task.

- Tool and interaction rows (verl's gsm8k_multiturn_w_tool / _w_interaction tables):
  `extra_info.need_tools_kwargs` true as verl reads it (any truthy value: `1` and the
  text "true" too, but text saying false, `FALSE_TEXTS` in any case, is false as its
  writer meant: verl trains such a row without tools, its flag alone only warned), a
  `tools_kwargs` naming a tool (`_tools_named`: verl offers the policy each of its keys,
  `{"code_interpreter": {}}` a tool taking no kwargs), or an `interaction_kwargs` holding a
  value. Their system prompt asks the policy to call a tool it is never offered: the
  rollout here is single-turn, as the refusal of verl's `multi_turn.*` keys says
  (docs/verl.md). False, null and empty values (`holds_nothing`; an interaction's dict of
  nothing too, and a tools_kwargs whose every key is null: a parquet struct unified across
  rows gives a row each tool any row names) ask for nothing. An
  `extra_info` written as JSON text or a parquet map is read as the dict it holds for this
  check: verl stops on either (`checked_extra_info` refuses it), but changing its form
  would not make such a row train, so it is refused as the tool row it is.
- Rows naming one of verl's agent loops (`agent_name` other than null or
  `single_turn_agent`: gsm8k_tool_agent_loop's `tool_agent`, a custom agent): verl's
  agent-loop rollout runs that loop for the row, as `rollout.agent.default_agent_loop`
  does for a row without the column, and that key is refused at any other value.
- Prompts holding verl's multimodal placeholders (`<image>`, `<video>`: the exact tokens
  verl's RLHFDataset splits a row's text at, every one of them, to place each image or
  video, where the row has an images or videos column; a row without one trains them as
  text) in a row without its media column (`media_columns.py` refuses a row with one),
  wherever in a turn's text: "<image>Find x" (geo3k) and "What is x in the figure below?
  <image>" alike were asked with no figure. A table meant as text (HTML or SVG prompts
  naming the tags) trains them as literal text with `data.placeholders_as_text`; a mention
  such as `<img>`, `<Image>` or "image" is no placeholder.

`unsupported_row` needs no tokenizer: `load_rl_prompts` runs it on every row, and
`mfsdp config check` on the first row of every train and val file. `unsupported_task`, its
tool and agent part, runs first in `checked_prompt_row` too: a refusal offering a remedy
(a reward function for a dict ground truth) sent the writer of such a row to write one, only
to be refused for its tools next.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.storage.unique_json import too_many_containers
from trainer.data.empty_cells import JSON_TEXT_MAX, MAX_DEPTH, holds_nothing

# the extra_info keys verl's tool and interaction rollouts read
TOOLS_KEY, INTERACTION_KEY = "tools_kwargs", "interaction_kwargs"
# need_tools_kwargs written as text meaning false (lower-cased, stripped)
FALSE_TEXTS = frozenset({"false", "0", "no", "off"})
# the column verl's agent-loop rollout picks a row's loop by, and the loop that is the
# single-turn rollout here (verl's default_agent_loop)
AGENT_COLUMN = "agent_name"
SINGLE_TURN_AGENT = "single_turn_agent"
# the columns `unsupported_row` reads besides the prompt
TASK_COLUMNS = ("extra_info", AGENT_COLUMN)
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
    """Why the RL `row` (read through `prompt_key` and `TASK_COLUMNS`) trains as another
    task here, or None: a tool, interaction or agent-loop row (`unsupported_task`), or a
    prompt with a media placeholder (unless `placeholders_as_text`,
    `data.placeholders_as_text`: the table means them as text)."""
    if why := unsupported_task(row):
        return why
    return None if placeholders_as_text else _placeholder(row.get(prompt_key), prompt_key)


def unsupported_task(row: dict[str, Any]) -> str | None:
    """Why `row` asks for a rollout other than the single-turn one here (tools, an
    interaction, an agent loop), or None: no change of the row's other columns trains it."""
    return _tool_key(_as_mapping(row.get("extra_info"))) or _agent_loop(row.get(AGENT_COLUMN))


def _as_mapping(extra_info: Any) -> dict | None:
    """`extra_info` as the dict its writer meant, or None: a dict, JSON text of an object
    (`json.dumps` of verl's dict) or a parquet map's (key, value) pairs, as pyarrow reads
    one. Only the tool check reads it so: verl reads a dict alone. Text is parsed within the
    bounds of a JSON cell (`empty_cells`), as every row pays for it: text longer than
    JSON_TEXT_MAX or of more than MAX_DEPTH objects and arrays (so nested no deeper) is read
    as no dict, refused as the text it is (`checked_extra_info`), never parsed (unbounded, a
    46 MB cell took 1.5 GB and deep nesting raised RecursionError)."""
    if isinstance(extra_info, dict):
        return extra_info
    if isinstance(extra_info, str):
        if len(extra_info) > JSON_TEXT_MAX or too_many_containers(extra_info, MAX_DEPTH):
            return None
        try:
            parsed = json.loads(extra_info)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    if isinstance(extra_info, (list, tuple)) and all(
        isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)
        for pair in extra_info
    ):
        return dict(extra_info)
    return None


def _agent_loop(name: Any) -> str | None:
    if name is None or name == SINGLE_TURN_AGENT:
        return None
    return (
        f"{AGENT_COLUMN} is {cut_to(repr(name), 40)}: verl's agent loops are not supported"
        " (the rollout here is single-turn: one response per prompt, no tools, interactions"
        " or custom agent loops, as rollout.agent.default_agent_loop other than"
        f" {SINGLE_TURN_AGENT} is refused); drop the {AGENT_COLUMN} column (or set it to"
        f" null or {SINGLE_TURN_AGENT}) and any prompt text asking for a tool"
    )


def _tool_key(extra_info: dict | None) -> str | None:
    if extra_info is None:
        return None
    flag = extra_info.get("need_tools_kwargs")
    tools = _tools_named(extra_info.get(TOOLS_KEY))
    named = ""
    if _flag_set(flag):
        what = f"need_tools_kwargs is {cut_to(repr(flag), 40)}"
    elif tools is None or tools:
        what = TOOLS_KEY
        if tools:
            names = ", ".join(cut_to(repr(tool), 40) for tool in tools[:3])
            more = f" and {len(tools) - 3} more" if len(tools) > 3 else ""
            named = f"it names {names}{more}, each a tool verl offers the policy; "
    elif not holds_nothing(extra_info.get(INTERACTION_KEY), nested=True):
        what = INTERACTION_KEY
    else:
        return None
    return (
        f"extra_info.{what}: {named}multi-turn tool/interaction rollouts are not supported (the"
        " rollout here is single-turn: the policy would be asked to use tools it is never"
        " offered, as verl's multi_turn.* keys are refused); drop the row's tools_kwargs,"
        " interaction_kwargs and need_tools_kwargs, and any prompt text asking for a tool"
    )


def _tools_named(tools_kwargs: Any) -> list[str] | None:
    """The tools verl's tool rollout offers for a row's `tools_kwargs`: the keys of the dict
    it holds (`_as_mapping`: JSON text of one, a parquet map, as for `extra_info`), each
    tool's kwargs whatever they hold: verl's rollout builds the tool list from the keys
    alone, so `{"code_interpreter": {}}` offers a tool that takes no kwargs (read as
    "nothing", such a row trained single-turn, its prompt asking for a tool never given).
    A key whose value is null (None, NaN) names none: a parquet struct unified across rows
    gives a row every tool any row names, null where it names none. None for a value that
    is no dict yet holds something (`holds_nothing`): no tool's name can be read from it."""
    mapping = _as_mapping(tools_kwargs)
    if mapping is None:
        return [] if holds_nothing(tools_kwargs) else None
    return [
        str(key)
        for key, kwargs in mapping.items()
        if not (kwargs is None or (isinstance(kwargs, float) and math.isnan(kwargs)))
    ]


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
