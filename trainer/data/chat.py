"""Turn one chat (a list of turns, each a role, content, ...) into token ids and an
assistant-token mask.

A row's `messages` are tokenized as verl's MultiTurnSFTDataset tokenizes them (below); a
row's prompt and response columns as its SFTDataset does (`tokenize_prompt_response`): the
prompt rendered with the generation prompt, then the response and the tokenizer's
eos_token, each tokenized alone, the loss on the latter.

Each turn reaches the chat template whole, as verl's MultiTurnSFTDataset gives it to
apply_chat_template (less its keys whose value is null, its content aside; a reply's
`reasoning` under `reasoning_content` too, as vLLM hands it on): a Qwen3-style
template renders `reasoning_content`, others `name` or `tool_calls`; a turn whose
`tool_calls` the template does not render is refused (`refuse_unrendered_tool_calls`), as is
a turn it leaves out (`refuse_unrendered_turns`, judged in a chat of the row's shape). Loss
is taken on assistant tokens only, on the tokens verl's MultiTurnSFTDataset trains: every
token an assistant turn renders to after the template's generation prompt
(`add_generation_prompt=True`), its end-of-turn tokens included. verl reads no
`{% generation %}` blocks, so neither does this: a template whose block held the content only,
its `<|im_end|>` after the block, trained no end-of-turn token in any row, and the model
never learned to stop. verl renders each turn alone; here growing prefixes of the
conversation are rendered, which gives the same tokens wherever verl's turns rendered alone
are the conversation rendered whole (its sanity check), and is checked: each prefix, and
each generation prompt, must be a prefix of the tokenization after it. Where a prefix is
not, the row trains as verl trains it if verl's sanity check passes, and is refused if it
fails (`tokenize_chat`); rows that train otherwise than in verl are marked
(`Example.unlike_verl`) for the run to count. A generation prompt a turn does not start with
(DeepSeek-R1's `<think>`) left that turn's first tokens, or all of it, untrained.

The template is rendered here (`template_sandbox`), as transformers' apply_chat_template
renders it but with every value it makes bounded by what the row's token limit
(`RowLimit`) can hold, and the text is tokenized only once it is within that bound.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import signal
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from markupsafe import escape

from mfsdp_ckpt.check.printable import cut_to, error_line
from mfsdp_ckpt.convert.export_source import MAX_TEMPLATE_BYTES
from mfsdp_ckpt.errors import MfsdpError, MfsdpUsageError
from trainer.data.chat_as_text import chat_written_as_text
from trainer.data.chat_call_arguments import served_arguments, with_parsed_arguments
from trainer.data.chat_call_repairs import unrenderable_call_turn, with_text_arguments
from trainer.data.chat_columns import ChatColumns, no_chat_columns
from trainer.data.chat_content_parts import with_null_content_as_parts
from trainer.data.empty_cells import holds_nothing
from trainer.data.template_sandbox import TemplateSizeError, render, size_of
from trainer.data.verl_turns import (
    NOT_RENDERED,
    TemplatePrompts,
    template_prompts,
    unlike_verl,
    verl_row,
)
from trainer.shown_value import shown_value

# A chat template renders a row in milliseconds; one that loops (three nested
# `range(100000)`) rendered the first row for ever.
TEMPLATE_SECONDS = 30.0


class ChatFormatError(MfsdpUsageError, ValueError):
    """A row cannot become a training example; the message names the row and the reason."""


class ChatTooLong(ChatFormatError):
    """The row renders to more text than its token limit can hold: it is over-long, and
    its caller's policy for over-long rows (refuse, or drop) applies."""


# Where transformers finds a tokenizer dir's chat template, the file whose template it renders
# first: additional_chat_templates/default.jinja replaces chat_template.jinja's (both are the
# template named `default`), which replaces tokenizer_config.json's. Its tokenizers never read
# chat_template.json, a processor's file: naming it, or tokenizer_config.json for a template
# read from a .jinja file, named a file the template did not come from.
TEMPLATE_FILES = (
    os.path.join("additional_chat_templates", "default.jinja"),
    "chat_template.jinja",
    "tokenizer_config.json",
)
# The most text a row may render to, whatever its token limit: tokenizing takes a few
# hundred bytes a character (a tokenizer of one token per character), so this bounds a
# row's tokenizing to about a GB. A row truncated to its token limit may be this long.
MAX_ROW_CHARS = 1 << 22


@dataclass(frozen=True)
class RowLimit:
    """What one row may render to: `tokens` tokens (the setting `key` names, such as
    data.max_length), so at most `tokens * longest_token` characters of text, the
    tokenizer's longest token having `longest_token` characters: text beyond that is
    more tokens than the limit whatever it says. A row that is to be `truncated` to the
    limit may be longer, up to MAX_ROW_CHARS, as may any row. `template` names the chat
    template in errors (its file). `remedy` is the setting besides `key` that lets such a
    row through (`data.truncation=left|right`), which the caller knows."""

    key: str
    tokens: int
    longest_token: int
    template: str
    truncated: bool = False
    remedy: str | None = None

    @property
    def chars(self) -> int:
        if self.truncated:
            return MAX_ROW_CHARS
        return min(self.tokens * self.longest_token, MAX_ROW_CHARS)

    def exceeded(self) -> str:
        """Why text over `chars` is too long, in words."""
        if self.chars < MAX_ROW_CHARS:
            return (
                f"more text than {self.key}={self.tokens} tokens can hold, at most"
                f" {self.longest_token} characters each"
            )
        return f"more than the {MAX_ROW_CHARS} characters of text a row may have"

    def too_long(self) -> str:
        """A row of more text than `chars`, in words, with what lets it through: the same
        advice the row gets once tokenized (`truncate`), whichever check finds it first. Past
        MAX_ROW_CHARS no setting does."""
        if self.chars >= MAX_ROW_CHARS:
            return self.exceeded()
        remedy = f" or set {self.remedy}" if self.remedy else ""
        return f"{self.exceeded()} (raise it{remedy})"


def row_limit(
    tokenizer: Any, key: str, tokens: int, truncated: bool = False, remedy: str | None = None
) -> RowLimit:
    """The RowLimit of `tokens` tokens of `tokenizer` (its vocabulary read once), whose chat
    template is checked to be of a template's size before any row renders with it."""
    check_template_size(tokenizer)
    longest = max((len(token) for token in tokenizer.get_vocab()), default=1)
    return RowLimit(key, tokens, max(longest, 1), _template_name(tokenizer), truncated, remedy)


def check_template_size(tokenizer: Any) -> None:
    """Refuse, naming its file, a chat template longer than a template file may be
    (MAX_TEMPLATE_BYTES): one in tokenizer_config.json is bounded only by that JSON's own
    limit, and it is compiled whole to render the rows: a huge one took GBs, then blamed
    the first row's render time. No template at all: `chat_ids` says so, naming the row.
    Every named template counts (a dict of them), not only the one rows render with."""
    template = getattr(tokenizer, "chat_template", None)
    templates = template.values() if isinstance(template, dict) else [template]
    size = max((len(text) for text in templates if isinstance(text, str)), default=0)
    if size > MAX_TEMPLATE_BYTES:
        raise ChatFormatError(
            f"{_template_name(tokenizer)}: {size} characters, more than the"
            f" {MAX_TEMPLATE_BYTES} a chat template may have (real ones are a few KB)"
        )


def _template_name(tokenizer: Any) -> str:
    """`the chat template in FILE` for a tokenizer read from a dir, FILE the one
    transformers took it from."""
    source = getattr(tokenizer, "name_or_path", "")
    for name in TEMPLATE_FILES if source else ():
        if os.path.isfile(os.path.join(source, name)):
            return f"the chat template in {os.path.join(source, name)}"
    return f"the chat template of {source}" if source else "the chat template"


@dataclass
class Example:
    input_ids: list[int]
    loss_mask: list[int]  # 1 where the token is assistant output (a training target)
    # the row's prompt turns as its data file holds them (`turn_texts`), before any chat
    # template: what a resume compares to tell an edited prompt (trainer/resume.py)
    prompt: tuple[str, ...] = ()
    # those turns' other keys with a value (`turn_keys_texts`), digested apart from `prompt`
    prompt_keys: tuple[str, ...] = ()
    # how verl's MultiTurnSFTDataset trains the row otherwise (`verl_turns.unlike_verl`):
    # "" where it trains it alike, which the run says for the rows where it does not
    unlike_verl: str = ""

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_targets(self) -> int:
        """Positions with a loss: tokens that are targets and have a token before them."""
        return sum(self.loss_mask[1:])


def messages_of(row: dict[str, Any], columns: ChatColumns) -> list[dict]:
    """verl's SFT `messages` column, or a prompt (text or chat turns) + a response text. A
    row's template arguments are refused only where its messages are read: verl's SFTDataset
    gives a prompt/response row's none to the template, nor does `tokenize_prompt_response`."""
    if _reads_messages(row, columns) and row.get(columns.messages) is not None:
        _refuse_template_arguments(row)
        messages = _turns_in(row[columns.messages], columns.messages)
        _refuse_turn_weights(messages)
    elif columns.source != "messages" and columns.prompt in row and columns.response in row:
        prompt, prompt_at = _field(row, columns.prompt, columns.prompt_fields)
        turns = (
            _turns_in(prompt, prompt_at)
            if isinstance(prompt, (list, tuple))
            else [{"role": "user", "content": _prompt_text(prompt, prompt_at)}]
        )
        response, response_at = _field(row, columns.response, columns.response_fields)
        content = _text(response, response_at, "response")
        messages = turns + [{"role": "assistant", "content": content}]
    elif columns.messages in row and columns.source != "prompt_response":  # an empty cell
        raise ChatFormatError(
            f"the '{columns.messages}' cell is null (empty): no chat turns to train on"
        )
    else:
        raise NoChatColumns(no_chat_columns(row, columns))
    if not messages:  # only a messages column can be empty: a response is a turn
        raise ChatFormatError(f"the '{columns.messages}' cell is an empty list: no chat turns")
    if not any(turn["role"] == "assistant" for turn in messages):
        raise ChatFormatError(
            f"the conversation has no assistant turn to learn from ('{columns.messages}')"
        )
    return messages


def _refuse_turn_weights(messages: list[dict]) -> None:
    """An assistant turn's `weight` other than 1 (OpenAI's fine-tuning format: 0 is "do not
    train this turn") is refused: no weight is read here, nor by verl, so a `weight: 0` turn
    trained as a target, without a word. Null (a parquet struct's absent key) and 1 change
    nothing."""
    for number, turn in enumerate(messages, 1):
        weight = turn.get("weight")
        if turn["role"] != "assistant" or weight is None or weight == 1:
            continue
        if isinstance(weight, float) and math.isnan(weight):  # pandas' missing value
            continue
        raise ChatFormatError(
            f"turn {number} ('assistant') has weight {weight!r}: per-turn weights (OpenAI's"
            " 0: do not train the turn) are not read here, nor by verl, which trains the turn;"
            " drop the turn to leave it out, or the key to train it"
        )


def _turns_in(value: Any, column: str) -> list[dict]:
    """The chat turns `value` of the row's `column` (`checked_turns`), refused naming the
    column: a row reads turns from its messages or its prompt, and the error ("each chat
    turn needs 'role' and 'content', found 1") said which of them only by its value."""
    try:
        return checked_turns(value)
    except ChatFormatError as err:
        raise ChatFormatError(f"'{column}': {err}") from None


class NoChatColumns(ChatFormatError):
    """A row has none of the columns its chat is read from. Rows hold only the columns
    the run reads (`read_rows_with_origins`): the caller says it again of the whole row
    (`no_chat_columns`), which names the columns there are and what reads them."""


def _reads_messages(row: dict[str, Any], columns: ChatColumns) -> bool:
    """Whether the row's chat is its messages column, not its prompt and response columns:
    as `columns.source` says, else where the row's messages cell has a value."""
    if columns.source == "auto":
        return row.get(columns.messages) is not None
    return columns.source == "messages"


# Columns verl's MultiTurnSFTDataset passes to the chat template with the row's turns
# (data.multiturn.tools_key / enable_thinking_key): a row's tool definitions, Qwen3's switch
TEMPLATE_COLUMNS = ("tools", "enable_thinking")


def _refuse_template_arguments(row: dict[str, Any]) -> None:
    """A row's chat template arguments are refused, as data.apply_chat_template_kwargs is:
    they were dropped, and the row trained as if it had no tools and thinking on. A cell
    that holds nothing (`holds_nothing`: null, [], {}, or '[]' stored as text) is no
    argument; a dict with keys is one, empty values or not, as `{% if tools %}` reads it."""
    for column in TEMPLATE_COLUMNS:
        value = row.get(column)
        if holds_nothing(value):  # '[]' as JSON text too, as verl stores tool lists
            continue
        raise ChatFormatError(
            f"column '{column}' ({cut_to(repr(value), 80)}): extra chat template arguments are not"
            " supported (the template renders the turns alone); drop the column"
        )


def _field(row: dict[str, Any], column: str, fields: tuple[str, ...]) -> tuple[Any, str]:
    """The value at `column`, then at each of `fields` inside it, in turn; and where it is
    (`extra_info.answer`)."""
    value, where = row[column], column
    for name in fields:
        if not isinstance(value, dict):
            raise ChatFormatError(
                f"'{where}' is {_kind(value)}, not a struct with a field '{name}'"
            )
        if name not in value:
            raise ChatFormatError(
                f"'{where}' has no field '{name}' (its fields: {', '.join(map(str, value))})"
            )
        value, where = value[name], f"{where}.{name}"
    return value, where


def _prompt_text(value: Any, column: str) -> str:
    """A prompt as text (`_text`), refused where it is chat turns written out as text
    (`chat_written_as_text`), as a `messages` cell holding them is."""
    text = _text(value, column, "prompt")
    if why := chat_written_as_text(text, column):
        raise ChatFormatError(why)
    return text


def _text(value: Any, column: str, role: str) -> str:
    """A prompt or response as text: a struct or a list was written into the chat as its
    Python repr (`{'question': ...}` trained on as the answer), so they are refused, and so
    is a number, as verl's SFT dataset refuses it (`response + eos_token` raises): its text
    was `str(value)`, a float32 column's 0.3 trained on as "0.30000001192092896"."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isnan(value):  # pandas' missing value
        raise ChatFormatError(f"the {role} ('{column}') is {value}, a missing value")
    if isinstance(value, dict):
        raise ChatFormatError(
            f"the {role} is a struct (fields: {', '.join(map(str, value))}): name the field"
            f" to read in data.{role}_dict_keys (verl's, e.g. [{next(iter(value), 'text')}])"
        )
    shown = f" {shown_value(value)}" if _is_number(value) else ""
    hint = _number_hint(value, "the column", trained=True)
    raise ChatFormatError(f"the {role} ('{column}') is {_kind(value)}{shown}, not text{hint}")


# Types named in words, not by their Python name: "is a bytes" read as broken English
_KINDS = {bytes: "binary data (bytes)", bytearray: "binary data (bytes)", type(None): "null"}


def _kind(value: Any) -> str:
    """What `value` is, for "is <kind>, not text": "an int", "binary data (bytes)"."""
    if type(value) in _KINDS:
        return _KINDS[type(value)]
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _is_number(value: Any) -> bool:
    """Whether `value` is a number a table's numeric column gives (int or float, numpy's
    too), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _number_hint(value: Any, where: str, *, trained: bool = False) -> str:
    """`; <what to do>` for a chat text that is a number, else "": which text it stands for
    is a guess (a float32 column's 0.3 reads 0.30000001192092896, an integer column with a
    null in it holds 72 as 72.0), so `where` (the column, the content) is to be stored as
    the text meant. Where earlier mfsdp versions `trained` on it (a prompt or response, as
    `str(value)`), that text is named: a run they trained continues exactly only on it."""
    if not _is_number(value):
        return ""
    earlier = (
        f"; earlier mfsdp versions read it as {str(value)!r}: store that text to continue"
        " such a run exactly"
        if trained
        else ""
    )
    return (
        f"; store {where} as text: a number's text is a guess (a float32 0.3 reads"
        f" 0.30000001192092896){earlier}"
    )


def checked_turns(turns: Any) -> list[dict]:
    """Chat turns as a chat template needs them: a list of turns whose role and content are
    text, each passed on whole (a copy of it, its values as the data file holds them, a
    reply's reasoning under both of vLLM's keys: `_with_reasoning_as_served`), as
    verl's MultiTurnSFTDataset passes them: keeping only role and content trained without
    the `reasoning_content` (or `name`, `tool_calls`, ...) a template renders. A string
    was iterated as turns (one per character), and content that is a number or a list of
    parts (OpenAI's multimodal form) made the template raise TypeError: a traceback in the
    rank instead of the row's name. A turn that calls tools may have null content, as
    OpenAI's API writes a turn that only calls tools and verl passes it to the template
    (Qwen2.5's renders the calls alone; DeepSeek-R1-Distill's renders them only so), in an
    SFT row and a GRPO prompt alike; the caller reads such content as None."""
    if not isinstance(turns, (list, tuple)):
        raise ChatFormatError(
            f"chat turns must be a list of {{role, content}}, found {type(turns).__name__}"
            f" {cut_to(repr(turns), 80)}"
        )
    for number, turn in enumerate(turns, 1):
        if not isinstance(turn, dict) or "role" not in turn or "content" not in turn:
            raise ChatFormatError(
                f"each chat turn needs 'role' and 'content', found {cut_to(repr(turn), 200)}"
            )
        _check_tool_calls(number, turn)
        content = turn["content"]
        calls_tools = content is None and _makes_calls(turn)
        if isinstance(content, float) and math.isnan(content):  # pandas' missing value
            raise ChatFormatError(
                f'a chat turn\'s content is {content}, a missing value (write "" for an empty'
                f" one), found {cut_to(repr(turn), 200)}"
            )
        if not isinstance(turn["role"], str) or not (isinstance(content, str) or calls_tools):
            raise ChatFormatError(
                f"a chat turn's role and content must be text (content may be null only"
                ' in a turn that calls tools, its tool_calls a list of calls; write "" for'
                f" an empty one), found {cut_to(repr(turn), 200)}"
                f"{_number_hint(content, 'the content')}"
            )
        _check_role(turn["role"])
    return [_with_reasoning_as_served(dict(turn)) for turn in turns]


# A reply's reasoning as vLLM 0.32 hands it to the template: under both keys
_REASONING_KEYS = ("reasoning_content", "reasoning")


def _with_reasoning_as_served(turn: dict) -> dict:
    """An assistant `turn` with its reasoning under both `reasoning` and `reasoning_content`,
    as vLLM 0.32 hands it to the template (its API reads `reasoning`, the field its replies
    write, and a deprecated `reasoning_content` where `reasoning` is null): Qwen3's template
    reads only `reasoning_content`, so a row collected from vLLM trained its replies without
    their reasoning, and the check for reasoning a template drops missed it."""
    reasoning = turn.get("reasoning")
    if reasoning is None or (isinstance(reasoning, str) and not reasoning.strip()):
        reasoning = turn.get("reasoning_content", reasoning)  # a blank one hides none
    if turn["role"] != "assistant" or reasoning is None:
        return turn
    return {**turn, **dict.fromkeys(_REASONING_KEYS, reasoning)}


def _check_tool_calls(number: int, turn: dict) -> None:
    """A turn's `tool_calls` that is not a list of objects is refused: JSON text (as a
    parquet or JSON export stores nested lists) reached the template as a string, which
    Hermes' looped over one character at a time, training some eighty empty calls; verl
    passes it on as it is, so trains the same. A value that holds nothing (`holds_nothing`:
    null, `[]`, `{}`, blank text, '[]' as text) is no calls, as a template column holding
    nothing is: exports write "" for "none" on plain replies. A call with no function name
    (`[{}]`) is refused too: there is no call the model could learn to make, and templates
    trained it as nothing (DeepSeek-R1's) or as `{ "name": ""}` (Hermes'). So are
    arguments vLLM fails the request on (`served_arguments`: JSON text nested deeper than
    Python's parser goes): they trained as text, a call no served model is shown."""
    calls = turn.get("tool_calls")
    if holds_nothing(calls):
        return
    if _is_call_list(calls):
        for at, call in enumerate(calls, 1):
            function = _function_of(call)
            name = function.get("name")
            if not isinstance(name, str) or not name.strip():
                raise ChatFormatError(
                    f"turn {number} ({turn.get('role')!r}): tool call {at} has no function"
                    f" name (each call is {{function: {{name, arguments}}}}), found"
                    f" {cut_to(repr(call), 80)}"
                )
            if served_arguments(function.get("arguments")) is None:
                raise ChatFormatError(
                    f"turn {number} ({turn.get('role')!r}): tool call {at} ({name!r}) has"
                    " arguments nested deeper than Python's JSON parser reads, on which vLLM"
                    " fails the request (it would train as text no served model is shown);"
                    f" store them nested less deeply, found {cut_to(repr(call), 80)}"
                )
        return
    found = (
        next(call for call in calls if not isinstance(call, dict))
        if isinstance(calls, (list, tuple))
        else calls
    )
    hint = ""
    if isinstance(calls, str):
        hint = (
            " (JSON text: store the calls as a list, not its text)"
            if calls.lstrip()[:1] in ("[", "{")
            else " (text: store the calls as a list, or null for none)"
        )
    raise ChatFormatError(
        f"turn {number} ({turn.get('role')!r}): tool_calls must be a list of objects"
        f" ({{function: {{name, arguments}}}}), found {_kind(found)} {cut_to(repr(found), 80)}"
        f"{hint}"
    )


def _function_of(call: dict) -> dict:
    """The part of a tool call holding its name and arguments: OpenAI's `function`, or the
    call itself where it has none (the flat form some templates read)."""
    function = call.get("function")
    return function if isinstance(function, dict) else call


def _is_call_list(calls: Any) -> TypeGuard[list[dict] | tuple[dict, ...]]:
    """Whether a turn's `tool_calls` is a list of objects, as templates read it."""
    return isinstance(calls, (list, tuple)) and all(isinstance(call, dict) for call in calls)


def _makes_calls(turn: dict) -> bool:
    """Whether `turn` calls tools: its `tool_calls` a list of one object or more (any other
    value left is one that holds nothing, `_check_tool_calls`)."""
    calls = turn.get("tool_calls")
    return bool(calls) and _is_call_list(calls)


def _given_keys(turn: dict) -> dict:
    """A turn's keys that a chat template sees: those with a value, and its content, null
    too (a turn that only calls tools), as verl passes it. Leaving out another key whose
    value is null is mfsdp's choice (transformers, and so verl, pass it on as None): a
    parquet struct column gives every turn each key some turn has, null where the turn has
    none, and a template testing `is defined` rendered `None` into the training text. Its
    tool calls are read by the same rule (`_without_nulls`)."""
    given = {key: value for key, value in turn.items() if value is not None or key == "content"}
    if isinstance(given.get("tool_calls"), (list, tuple)):
        given["tool_calls"] = [_without_nulls(call) for call in given["tool_calls"]]
    return given


def _without_nulls(value: Any) -> Any:
    """`value` (a tool call) without the keys whose value is null, at every depth: a parquet
    struct gives each call every argument key any call has (`{"city": "Oslo", "a": null}`),
    and the template wrote those nulls into the call the model learned to make."""
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, (list, tuple)):
        return [_without_nulls(item) for item in value]
    return value


def _template_turns(turns: Iterable[dict]) -> list[dict]:
    """Turns as the chat template sees them: each turn's keys as the data file gives them,
    as verl passes them to apply_chat_template, less those whose value is null
    (`_given_keys`), and `tool_calls: []` read as null: OpenAI exports write it on plain
    replies, and templates testing `is defined` rendered it (Gemma 3's trained every reply
    with a `[]` before it, Llama 3.1's "No tool calls found." instead of it). No key is
    renamed: a template reads the keys it knows. (The resume digest, `turn_keys_texts`,
    keeps the `[]` it always recorded.)"""
    return [_without_no_calls(_given_keys(turn)) for turn in turns]


def _without_no_calls(turn: dict) -> dict:
    """`turn` without its `tool_calls` key where that holds nothing (`[]`, "", `{}`): a
    template testing it as true (blank text) looped over its characters as calls."""
    if "tool_calls" in turn and holds_nothing(turn["tool_calls"]):
        return {key: value for key, value in turn.items() if key != "tool_calls"}
    return turn


def turn_texts(turns: Iterable[dict]) -> tuple[str, ...]:
    """Chat turns as plain text, role then content of each, in order: the prompt as the data
    file says it, for the resume digest (`Example.prompt`), in the form checkpoints have
    always recorded. A template may print the date (Llama 3's system header), so its tokens
    differ from day to day where the text does not. The turns' other keys have a digest of
    their own (`turn_keys_texts`). A null content (a turn that only calls tools) is empty
    text: its calls are among those keys."""
    return tuple(text for turn in turns for text in (turn["role"], turn["content"] or ""))


def turn_keys_texts(turns: Iterable[dict]) -> tuple[str, ...]:
    """The keys of chat turns besides role and content that have a value (`name`,
    `reasoning_content`, `tool_calls`, ...), which a template may render: one JSON text per
    turn, `{}` for a turn with none, and no text at all where no turn has any, so that a
    resume tells an edited key from an unchanged one (`Example.prompt_keys`). Kept apart from
    `turn_texts`, whose digest checkpoints recorded before these keys reached the template:
    folding them in warned of other prompts on resuming such a checkpoint, the file unchanged."""
    others = [
        {key: value for key, value in _given_keys(turn).items() if key not in ("role", "content")}
        for turn in turns
    ]
    if not any(others):
        return ()
    return tuple(
        json.dumps(keys, ensure_ascii=False, sort_keys=True, default=repr) for keys in others
    )


# The roles chat templates render (OpenAI's, Llama 3.1's ipython); ShareGPT's names for two
_ROLES = ("system", "user", "assistant", "tool", "developer", "ipython", "function")
_SHAREGPT_ROLES = {"human": "user", "gpt": "assistant"}


def _check_role(role: str) -> None:
    """A role another spelling of a known one (`User`, ShareGPT's `human` / `gpt`) is refused:
    templates match roles exactly, so it rendered as text and an `Assistant` turn was never
    a target. Other roles are left to the template, which may know them; a turn it does not
    render is refused (`refuse_unrendered_turns`)."""
    meant = _SHAREGPT_ROLES.get(role) or (role.lower() if role.lower() in _ROLES else None)
    if meant is not None and meant != role:
        raise ChatFormatError(f"role {role!r}: chat templates match roles exactly; write {meant!r}")


class _TemplateTimeout(ChatFormatError):
    """Raised by SIGALRM's handler; `chat_ids` words it."""


def _out_of_time(signum: int, frame: Any) -> None:
    raise _TemplateTimeout


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise _TemplateTimeout in the block after `seconds` (wall clock), through SIGALRM: a
    template is Python bytecode (Jinja), which a signal handler interrupts. Only in the main
    thread and while nothing else uses SIGALRM; otherwise the block runs unbounded."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGALRM) != signal.SIG_DFL
        or signal.getitimer(signal.ITIMER_REAL)[0] > 0
    ):
        yield
        return
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def chat_ids(
    tokenizer: Any,
    turns: list[dict],
    limit: RowLimit,
    *,
    add_generation_prompt: bool = False,
) -> dict[str, Any]:
    """What `tokenizer.apply_chat_template(turns, tokenize=True, return_dict=True, ...)`
    gives (`input_ids`), with the rendering bounded by `limit`, and the rendered `text`.

    The template is the model dir's code, run on each row: one that raises
    (`raise_exception(...)`, an undefined name) was a traceback in the rank quoting its
    message raw, escapes and newlines included; one that loops never finished; one that
    repeats a string (`'a' * 600000000`) made it in C, where no signal stops it, and the
    tokenizer aborted the process on the text; a tokenizer whose Rust code panics on the
    text raised pyo3's PanicException, past `except Exception`. Each is now one
    ChatFormatError (the caller names the row), ChatTooLong for more text than the limit
    holds; Rust's own panic lines still precede a panic's."""
    template = limit.template
    try:
        with _time_limit(TEMPLATE_SECONDS):
            text = _rendered_as_served(
                tokenizer, _template_turns(turns), limit, add_generation_prompt
            )
            return {"input_ids": list(_encoded(tokenizer, text)["input_ids"]), "text": text}
    except TemplateSizeError as err:
        raise ChatTooLong(f"{template}: rendering it, {err}: {limit.exceeded()}") from None
    except _TemplateTimeout:
        raise ChatFormatError(
            f"{template} took more than {TEMPLATE_SECONDS:g} s to render it"
        ) from None
    except MfsdpError:
        raise
    except Exception as err:  # the template's own code: anything it raises
        cause = error_line(err, joined=True)
        why = unrenderable_call_turn(
            lambda variant: _render_or_none(tokenizer, variant, limit, add_generation_prompt), turns
        )
        raise ChatFormatError(
            f"{why[0]}: {template} {why[1]} ({cause}); {why[2]}"
            if why
            else f"{template} cannot render it ({cause})"
        ) from None


def _rendered_as_served(
    tokenizer: Any, turns: list[dict], limit: RowLimit, add_generation_prompt: bool
) -> str:
    """`_rendered_with_served_arguments` of `turns`, their content as text, as verl hands
    it to apply_chat_template. A template reading content as parts that raises on that
    (Gemma 3's on a null content) renders the null contents as vLLM hands them to it
    (`with_null_content_as_parts`: no parts), so a turn that only calls tools trains and
    prompts as vLLM serves it; the other contents stay text (given parts, Llama-3.2-
    Vision's system prompt rendered as the list's repr, Mistral-Small-3.1's assistant turns
    raised)."""
    try:
        return _rendered_with_served_arguments(tokenizer, turns, limit, add_generation_prompt)
    except MfsdpError:
        raise
    except Exception:
        as_parts = with_null_content_as_parts(turns, tokenizer.get_chat_template())
        if as_parts is None:
            raise
        return _rendered_with_served_arguments(tokenizer, as_parts, limit, add_generation_prompt)


def _rendered_with_served_arguments(
    tokenizer: Any, turns: list[dict], limit: RowLimit, add_generation_prompt: bool
) -> str:
    """`_rendered` of `turns` with their calls' JSON-text object arguments parsed, as vLLM
    serves them (`with_parsed_arguments`). A template that raises on such arguments as an
    object but renders them as text (DeepSeek-R1-Distill's joins them to text) renders the
    text as the row gives it: such a template takes arguments as text alone."""
    served = with_parsed_arguments(turns)
    try:
        return _rendered(tokenizer, served, limit, add_generation_prompt)
    except MfsdpError:
        raise
    except Exception:
        if served == turns:
            raise
        return _rendered(tokenizer, turns, limit, add_generation_prompt)


def _render_or_none(
    tokenizer: Any, turns: list[dict], limit: RowLimit, add_generation_prompt: bool
) -> str | None:
    """The text of `turns` rendered as `chat_ids` renders them, bounded alike; None where
    the template fails on them, whatever the failure."""
    try:
        with _time_limit(TEMPLATE_SECONDS):
            return _rendered_as_served(
                tokenizer, _template_turns(turns), limit, add_generation_prompt
            )
    except Exception:
        return None


def _rendered(
    tokenizer: Any, turns: list[dict], limit: RowLimit, add_generation_prompt: bool
) -> str:
    """`render` of the chat template within `limit`, the size guard's trips told apart: a row
    whose own text, or its rendering, is longer than the limit holds is ChatTooLong with the
    row-length advice (`RowLimit.too_long`); only a template making values past what any row
    may (MAX_ROW_CHARS) is refused as the template (its TemplateSizeError). The bound derived
    from a small data.max_length is a few hundred characters, which ordinary text passes:
    such rows were blamed on the template, quoting the expression that tripped. A row the
    template renders within the limit after all (a value it only made on the way was
    larger) is rendered at MAX_ROW_CHARS, as a row to be truncated is."""
    source = tokenizer.get_chat_template()
    variables = {
        "messages": turns,
        "tools": None,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        **tokenizer.special_tokens_map,
    }
    try:
        return render(source, limit.chars, **variables)
    except TemplateSizeError as err:
        if size_of(turns, MAX_ROW_CHARS) > limit.chars:
            raise ChatTooLong(limit.too_long()) from None
        if limit.chars >= MAX_ROW_CHARS:
            raise
        tripped = err
    try:
        text = render(source, MAX_ROW_CHARS, **variables)
    except TemplateSizeError:
        raise tripped from None
    if len(text) > limit.chars:
        raise ChatTooLong(limit.too_long())
    return text


def _encoded(tokenizer: Any, text: str) -> Any:
    """`tokenizer(text)` without special tokens, as verl tokenizes a rendered chat. pyo3's
    PanicException (a BaseException, past `except Exception`: the tokenizer's Rust code gave
    up, e.g. a pre-tokenizer regex of tokenizer.json past Oniguruma's backtracking limit) is
    a ChatFormatError naming the tokenizer."""
    try:
        return tokenizer(text, add_special_tokens=False)
    except BaseException as err:
        if type(err).__name__ != "PanicException":
            raise
        raise ChatFormatError(
            f"{_tokenizer_name(tokenizer)} cannot encode it ({error_line(err, joined=True)})"
        ) from None


def _tokenizer_name(tokenizer: Any) -> str:
    """`the tokenizer of DIR` for a tokenizer read from DIR, in errors."""
    source = getattr(tokenizer, "name_or_path", "")
    return f"the tokenizer of {source}" if source else "the tokenizer"


def tokenize_sft_row(
    tokenizer: Any, row: dict[str, Any], columns: ChatColumns, limit: RowLimit
) -> tuple[list[dict], Example]:
    """A row's conversation (`messages_of`) and its training example, made as verl makes it
    from such a row: a `messages` row as its MultiTurnSFTDataset does (`tokenize_chat`), a
    prompt/response row as its SFTDataset does (`tokenize_prompt_response`)."""
    messages = messages_of(row, columns)
    if _reads_messages(row, columns):
        return messages, tokenize_chat(tokenizer, messages, limit)
    *prompt, response = messages
    return messages, tokenize_prompt_response(tokenizer, prompt, response["content"], limit)


def tokenize_prompt_response(
    tokenizer: Any, prompt: list[dict], response: str, limit: RowLimit
) -> Example:
    """A prompt/response row as verl's SFTDataset tokenizes it (its `__getitem__`): the
    prompt's turns rendered with the generation prompt and tokenized alone, then the response
    followed by the tokenizer's eos_token, tokenized alone; the loss is on those, eos
    included. The chat template never sees the response, so the eos token ends it, not the
    template's turn end: rendered as an assistant turn, a Qwen template's `<|im_end|>` and
    newline taught a base model (eos `<|endoftext|>`) to stop on a token its generation does
    not stop on, and an instruct model a newline more per row than verl trains."""
    reply_text = response + _eos_token(tokenizer)
    rendered = chat_ids(tokenizer, prompt, limit, add_generation_prompt=True)
    refuse_unrendered_tool_calls(
        tokenizer, prompt, limit, rendered["text"], add_generation_prompt=True
    )
    refuse_unrendered_turns(tokenizer, prompt, limit, rendered["text"], add_generation_prompt=True)
    if len(rendered["text"]) + len(reply_text) > limit.chars:
        raise ChatTooLong(f"the prompt with its response is {limit.too_long()}")
    prompt_ids = rendered["input_ids"]
    reply_ids = list(_encoded(tokenizer, reply_text)["input_ids"])
    return Example(prompt_ids + reply_ids, [0] * len(prompt_ids) + [1] * len(reply_ids))


def _eos_token(tokenizer: Any) -> str:
    """The token a prompt/response row's response ends with. A tokenizer without one is
    refused: verl's SFTDataset fails on it (`response + None`), and no other token says
    where the model is to stop."""
    eos = tokenizer.eos_token
    if not eos:
        raise ChatFormatError(
            f"{_tokenizer_name(tokenizer)} has no eos_token (tokenizer_config.json), which a"
            " prompt/response row's response ends with, as in verl's SFTDataset; set it"
            " there, or give the rows as messages"
        )
    return str(eos)


def refuse_unrendered_tool_calls(
    tokenizer: Any,
    turns: list[dict],
    limit: RowLimit,
    text: str,
    *,
    add_generation_prompt: bool = False,
) -> None:
    """ChatFormatError naming the first turn whose `tool_calls` the template does not render:
    in the chat of the row's shape (`probed_chat`) a call's name or arguments, each a marker,
    are not in the text. A template that ignores them (the tiny model's) trained a turn that
    called a tool as an empty reply; one that only branches on them (vLLM's Mistral example
    writes `[TOOL_CALLS]` and the turn's content, never a call) trained the model to answer
    with `[TOOL_CALLS]None`, which rendering the turns with and without their calls took for
    rendered. Other keys a template ignores are left to it, as verl leaves them. Where the
    template raises on the probe, the turns are rendered without their calls (one render
    more) and refused where the text is the same; a template that cannot render them without
    their calls renders the calls (Qwen2.5's raises on a null content without calls)."""
    calling = [index for index, turn in enumerate(turns) if _makes_calls(turn)]
    if not calling:
        return
    probe = probed_chat(tokenizer, turns, limit, add_generation_prompt)
    if probe is not None:
        if probe.calls_left_out:
            _refuse_calls_left_out(
                tokenizer, turns, probe.calls_left_out[0], limit, add_generation_prompt
            )
        return
    without = [{key: value for key, value in turn.items() if key != "tool_calls"} for turn in turns]
    try:
        rendered = chat_ids(tokenizer, without, limit, add_generation_prompt=add_generation_prompt)
    except ChatFormatError:  # it renders them: without them it took another branch, and failed
        return
    if rendered["text"] == text:
        _refuse_calls_left_out(tokenizer, turns, calling[0], limit, add_generation_prompt)


def _refuse_calls_left_out(
    tokenizer: Any, turns: list[dict], index: int, limit: RowLimit, add_generation_prompt: bool
) -> None:
    """The ChatFormatError of `refuse_unrendered_tool_calls` for turn `index`. Where the
    template renders its calls once the turn is stored otherwise, the remedy is storing it
    so, not another template: its content null where it is empty (DeepSeek-R1-Distill's
    writes a turn's calls only where its content is null, as OpenAI's API writes a turn
    that only calls tools), and its arguments as JSON text too where that template is given
    them as objects, which it joins to text. (Text arguments reach the template as vLLM
    serves them, an object: `served_arguments`.)"""
    turn = turns[index]
    empty = isinstance(turn["content"], str) and not turn["content"].strip()
    chat = (tokenizer, turns, index, limit, add_generation_prompt)
    if empty and _renders_calls(*chat, {**turn, "content": None}):
        why = (
            f"as its content is {turn['content']!r} (the calls would be left out); write"
            " the content as null, as OpenAI's API writes a turn that only calls tools: the"
            " template renders calls only there"
        )
    elif empty and _renders_calls(*chat, {**with_text_arguments(turn), "content": None}):
        why = (
            f"as its content is {turn['content']!r} and its calls' arguments are objects (the"
            " calls would be left out); write the content as null and each call's arguments"
            ' as JSON text (\'{"city": "Oslo"}\'), as OpenAI\'s API writes them: the template'
            " renders calls only so"
        )
    else:
        why = (
            "so tool-calling chats are not trained with it (the calls would be left out);"
            " use a template that renders tool_calls"
        )
    raise ChatFormatError(
        f"{turn['role']!r} turn with tool_calls: {limit.template} does not render them"
        f" (turn {index + 1}: its calls' names and arguments are not in the text), {why},"
        f" found {cut_to(repr(turn), 200)}"
    )


def _renders_calls(
    tokenizer: Any,
    turns: list[dict],
    index: int,
    limit: RowLimit,
    add_generation_prompt: bool,
    turn: dict,
) -> bool:
    """Whether the template renders the calls of `turn` in place of turn `index` of `turns`
    (`probed_chat`)."""
    probe = probed_chat(
        tokenizer, [*turns[:index], turn, *turns[index + 1 :]], limit, add_generation_prompt
    )
    return probe is not None and index not in probe.calls_left_out


def refuse_unrendered_turns(
    tokenizer: Any,
    turns: list[dict],
    limit: RowLimit,
    text: str,
    *,
    add_generation_prompt: bool = False,
) -> None:
    """ChatFormatError naming the first turn the template leaves out of `text` (the turns as
    `chat_ids` rendered them), the row trained without it, a tool's result left out and the
    model taught to make it up; verl drops such a turn too. A turn of a role other than user
    and assistant is refused where the template leaves out a turn there in a chat of the
    row's shape (`dropped_turns`: Qwen2.5's renders no `function`, `developer`, `ipython` or
    `observation` turn; Mistral-v0.3's renders a system turn only where a user turn ends the
    chat, so a prompt keeps it and a reply-ending chat drops it), whatever the rest of the
    row: a reply the template reshapes (Qwen3's `<think>` split out) or the turn's content
    quoted in another turn hid it from a comparison of texts. Where the template raises on
    that probe, a turn is refused where the text lacks its content and the turns rendered
    without every such turn are the same text (one render, only for a row with such a
    turn); a template that fails without them renders them. An assistant turn the template
    keeps but whose content it leaves out, whole or in part, is refused too where it trains
    (`_refuse_reply_left_out`): a chat rendered with the generation prompt is a prompt (a
    GRPO prompt, a prompt/response row's prompt), none of whose turns trains, and a template
    leaving out reasoning of its earlier replies (Qwen3's, DeepSeek-R1's) renders it as the
    model is served."""
    if any(turn["role"] not in ("user", "assistant") for turn in turns):
        for index in dropped_turns(tokenizer, turns, limit, add_generation_prompt) or ():
            if turns[index]["role"] not in ("user", "assistant"):
                _refuse_left_out(turns, turns[index], limit, add_generation_prompt)
    lacked = [
        turn
        for turn in turns
        if isinstance(turn["content"], str) and turn["content"].strip() not in text
    ]
    if lacked:
        kept = [turn for turn in turns if all(turn is not other for other in lacked)]
        try:
            rendered = chat_ids(tokenizer, kept, limit, add_generation_prompt=add_generation_prompt)
        except ChatFormatError:
            rendered = None
        if rendered is not None and rendered["text"] == text:
            _refuse_left_out(turns, lacked[0], limit, add_generation_prompt)
    if not add_generation_prompt:
        _refuse_reply_left_out(tokenizer, turns, limit, text)


def _squeezed(text: str) -> str:
    """`text` without whitespace, in lower case: a content the template re-lays (Qwen3's
    `<think>` on lines of its own), trims or capitalizes is still in the text so read."""
    return "".join(text.split()).lower()


def _refuse_left_out(turns: list[dict], turn: dict, limit: RowLimit, prompt: bool) -> None:
    """The ChatFormatError of `refuse_unrendered_turns` for `turn`, naming its number; the
    text it is left out of is a `prompt` (rendered with the generation prompt: a GRPO
    rollout's, a prompt/response row's) or a chat to train on."""
    number = next(index for index, other in enumerate(turns, 1) if other is turn)
    text = "the prompt" if prompt else "the training text"
    raise ChatFormatError(
        f"turn {number}, role {turn['role']!r}: {limit.template} does not render it, so"
        f" its content would be left out of {text}; write it under a role the"
        " template renders (a tool's result as 'tool'), or drop the turn, found"
        f" {cut_to(repr(turn), 200)}"
    )


def _refuse_reply_left_out(tokenizer: Any, turns: list[dict], limit: RowLimit, text: str) -> None:
    """ChatFormatError naming the first assistant turn whose content, or reasoning, the
    template leaves out of `text` though it renders the turn: Hermes' and Llama 3.1's write
    no content in a turn that calls tools (its marker is missing in the chat of the row's
    shape, `probed_chat`), DeepSeek-R1's first template keeps only what follows `</think>`
    (a line of the content is not in the text, whitespace and case aside), and every
    template but Qwen3's (which renders it in the replies after the last user turn) ignores
    `reasoning_content`. verl trains such a turn without it, silently: a distillation set
    lost all its reasoning. A content the template changes but keeps (trimmed, capitalized,
    JSON- or HTML-escaped: `_written_forms`) is in the text; a blank one loses nothing.
    Asked of a chat whose assistant turns train (a messages row's), never of a prompt's.
    The turns of other roles are judged by `refuse_unrendered_turns` alone."""
    replies = [
        index
        for index, turn in enumerate(turns)
        if turn["role"] == "assistant"
        and ((isinstance(turn["content"], str) and turn["content"].strip()) or _has_reasoning(turn))
    ]
    if not replies:
        return
    probe = probed_chat(tokenizer, turns, limit)
    squeezed: str | None = None  # the text without its whitespace, lower case, once needed
    for index in replies:
        if probe is not None and index in probe.reasoning_left_out:
            _refuse_reasoning_left_out(tokenizer, turns, index, limit)
        content = turns[index]["content"]
        if not isinstance(content, str) or not content.strip():
            continue
        dropped = probe is not None and index in probe.left_out
        if not dropped and content.strip() in text:
            continue
        squeezed = squeezed if squeezed is not None else _squeezed(text)
        if not dropped and any(_squeezed(form) in squeezed for form in _written_forms(content)):
            continue
        lines = content.strip().splitlines()
        missing = [line for line in lines if _squeezed(line) not in squeezed]
        whole = dropped or len(missing) in (0, len(lines))
        quoted = cut_to(repr(content.strip() if whole else "\n".join(missing)), 120)
        part = f"its content ({quoted})" if whole else f"its content in part ({quoted})"
        raise ChatFormatError(
            f"turn {index + 1}, role 'assistant': {limit.template} renders the turn but"
            f" leaves out {part}, so it would be trained without it (verl drops it"
            f" silently); {_reply_advice(tokenizer, turns, index, limit)}"
        )


def _reply_advice(tokenizer: Any, turns: list[dict], index: int, limit: RowLimit) -> str:
    """What to do with assistant turn `index` whose content the template leaves out, true
    of this template: moving reasoning into `reasoning_content` only where it renders that
    key in this turn, a calling turn's text into a turn of its own only for a calling turn."""
    turn = turns[index]
    ways = ["use a template that renders it"]
    if _renders_reasoning(tokenizer, turns, index, limit):
        ways.append("move reasoning into 'reasoning_content', which this template renders")
    if _makes_calls(turn):
        ways.append("move the text of a turn with tool_calls into a turn of its own")
    return ", or ".join(ways)


def _renders_reasoning(tokenizer: Any, turns: list[dict], index: int, limit: RowLimit) -> bool:
    """Whether the template renders a `reasoning_content` in turn `index` of `turns`."""
    turn = {**turns[index], "reasoning_content": "reasoning"}
    probe = probed_chat(tokenizer, [*turns[:index], turn, *turns[index + 1 :]], limit)
    return probe is not None and index not in probe.reasoning_left_out


def _refuse_reasoning_left_out(
    tokenizer: Any, turns: list[dict], index: int, limit: RowLimit
) -> None:
    """The ChatFormatError for trained assistant turn `index` whose `reasoning_content` the
    template does not render, with the form of the turn that keeps it where the template
    has one: the reasoning in the content before the answer, as DeepSeek-R1 writes it,
    where the template keeps that (`_keeps_reasoning_in_content`)."""
    turn = turns[index]
    last = max(i for i, each in enumerate(turns) if each.get("role") == "assistant")
    if last != index and _renders_reasoning(tokenizer, turns, last, limit):
        advice = (
            "this template renders reasoning only in the replies after the last user turn"
            " (earlier ones are served without it): drop the key from earlier replies, or"
            " make one row per reply, its reasoning in the last turn"
        )
    elif _keeps_reasoning_in_content(tokenizer, turns, index, limit):
        advice = (
            "write it into the content as '<think>\\n...\\n</think>\\n\\n' before the answer,"
            " which this template keeps, or drop the key to train the reply without it"
        )
    else:
        advice = (
            "use a template that renders it (Qwen3's renders it in the replies after the last"
            " user turn), or drop the key to train the reply without it"
        )
    raise ChatFormatError(
        f"turn {index + 1}, role 'assistant': {limit.template} renders the turn but leaves"
        f" out its reasoning_content ({cut_to(repr(turn['reasoning_content']), 80)}), so it"
        f" would be trained without it (verl drops it silently); {advice}"
    )


def _keeps_reasoning_in_content(
    tokenizer: Any, turns: list[dict], index: int, limit: RowLimit
) -> bool:
    """Whether the template keeps reasoning written into turn `index`'s content as
    `<think>...</think>` before the answer (its `reasoning_content` key dropped)."""
    turn = {key: value for key, value in turns[index].items() if key != "reasoning_content"}
    marker = _REASONING_MARKER.format("x", "x")
    turn["content"] = f"<think>\n{marker}\n</think>\n\n{turn['content'] or ''}"
    chat = [*turns[:index], turn, *turns[index + 1 :]]
    try:
        text = chat_ids(tokenizer, chat, replace(limit, truncated=True))["text"]
    except ChatFormatError:
        return False
    return marker in text.lower()


def _written_forms(content: str) -> tuple[str, ...]:
    """The forms in which a template writes `content` whole: as it is, JSON-escaped (its
    `|tojson`, as transformers writes it: a newline, quote, tab or backslash escaped) and
    HTML-escaped (`|e`: a quote, `<` or `&`)."""
    content = content.strip()
    return (content, json.dumps(content, ensure_ascii=False)[1:-1], str(escape(content)))


# A probe turn's content: text no template writes of its own, its turn's code at both ends
# (`_PROBE_END`). A turn is rendered where an end is in the text, case aside: a template that
# changes a turn's text (upper, capitalize, title, trim, tojson, replace of '_', a slice or
# truncate keeping its front or its back) still shows it, where the whole marker matched as
# written judged such a turn left out. Every turn's code in a chat is as long as the others
# (`_turn_codes`, letters of `_CODE_LETTERS`, which hold no letter of the ends' `zq` and `qz`,
# so no end is a part of another or spans two), and is one letter up to 24 turns: a template
# slicing 5 characters showed turns 0 to 9 and hid the rest, where the number was the code.
_PROBE_END = "zq{}qz"
_PROBE_MARKER = f"{_PROBE_END}_mfsdp_turn_probe_7f3a9c_{_PROBE_END}"
# A probe turn's `reasoning_content`, marked as its content is, with ends of its own
_REASONING_END = "zr{}rz"
_REASONING_MARKER = f"{_REASONING_END}_mfsdp_reasoning_probe_{_REASONING_END}"
_CODE_LETTERS = "abcdefghijklmnoprstuvwxy"
# A probe call's name and arguments, numbered over the chat's calls as the turns are
_CALL_NAME = "zn{}nz"
_CALL_ARGUMENT = "za{}az"
# Shapes whose `probed_chat` answer a tokenizer keeps: a dataset has a few; past this many
# (every row its own shape) a row is probed uncached rather than memory held per row
_SHAPES_KEPT = 4096


@dataclass(frozen=True)
class Probe:
    """What a chat template leaves out of a chat of some shape (`probed_chat`): the indexes
    of the turns whose content is not in the text, of those with a call whose name or
    arguments are not, and of those whose `reasoning_content` is not."""

    left_out: tuple[int, ...]
    calls_left_out: tuple[int, ...]
    reasoning_left_out: tuple[int, ...] = ()


# Each tokenizer's `probed_chat` answers, by (chat template, shape of the chat)
_PROBES: weakref.WeakKeyDictionary[Any, dict[tuple, Probe | None]] = weakref.WeakKeyDictionary()


def dropped_turns(
    tokenizer: Any, turns: list[dict], limit: RowLimit, add_generation_prompt: bool = False
) -> tuple[int, ...] | None:
    """The indexes of `turns` that `tokenizer`'s chat template leaves out of a chat of their
    shape (`probed_chat`); None where the template raises on the probe."""
    probe = probed_chat(tokenizer, turns, limit, add_generation_prompt)
    return None if probe is None else probe.left_out


def probed_chat(
    tokenizer: Any, turns: list[dict], limit: RowLimit, add_generation_prompt: bool = False
) -> Probe | None:
    """What `tokenizer`'s chat template leaves out of a chat of the shape of `turns`: the
    turns, each its role and keys, their contents replaced by numbered markers and each
    tool call's name and arguments by others (`_probe_call`), their `reasoning_content` by
    markers of its own, rendered once; a turn neither
    of whose marker's ends is in the text, case aside, is left out (`_PROBE_MARKER`: what a
    template does to a turn's text keeps one), and so are the calls of a turn one of whose
    call markers is missing. A null or empty content stays so (a turn holding none is never
    left out): DeepSeek-R1-Distill's template writes a turn's calls only where its content
    is null, another only where it is not empty, so a marker there hid calls the row's text
    has, or showed calls it lacks. Whether a template renders a turn can depend on the chat
    around it (Mistral-v0.3's writes the system turn into the last turn only where that is a
    user turn), so a probe of fixed layouts misjudged prompts. None where the template raises
    on the probe (the row's own check of texts decides then). Asked once per template and
    shape (the roles, each turn's content null, empty or not, each turn's calls laid out,
    the generation prompt), so a file of a few shapes costs a few renders, not one per row;
    rendered unbounded (`truncated`), as the probe is no row."""
    shape = (
        str(getattr(tokenizer, "chat_template", "")),
        tuple(
            (
                turn["role"],
                _content_shape(turn["content"]),
                _calls_shape(turn.get("tool_calls")),
                _has_reasoning(turn),
            )
            for turn in turns
        ),
        add_generation_prompt,
    )
    answers = _PROBES.setdefault(tokenizer, {})
    if shape in answers:
        return answers[shape]
    probe: list[dict] = []
    call_markers: list[tuple[int, str]] = []
    codes = _turn_codes(len(turns))
    marked = [bool(turn["content"]) for turn in turns]
    for index, turn in enumerate(turns):
        probed = dict(turn)
        if marked[index]:
            probed["content"] = _PROBE_MARKER.format(codes[index], codes[index])
        if _has_reasoning(turn):
            for key in _REASONING_KEYS:
                probed[key] = _REASONING_MARKER.format(codes[index], codes[index])
        if _makes_calls(turn):
            calls = [
                _probe_call(call, len(call_markers) + at)
                for at, call in enumerate(turn["tool_calls"])
            ]
            probed["tool_calls"] = [call for call, _ in calls]
            call_markers += [(index, marker) for _, markers in calls for marker in markers]
        probe.append(probed)
    try:
        text = chat_ids(
            tokenizer,
            probe,
            replace(limit, truncated=True),
            add_generation_prompt=add_generation_prompt,
        )["text"].lower()
        answer: Probe | None = Probe(
            tuple(
                index
                for index, code in enumerate(codes)
                if marked[index] and _PROBE_END.format(code) not in text
            ),
            tuple(sorted({index for index, marker in call_markers if marker not in text})),
            tuple(
                index
                for index, code in enumerate(codes)
                if _has_reasoning(turns[index]) and _REASONING_END.format(code) not in text
            ),
        )
    except ChatFormatError:
        answer = None
    if len(answers) < _SHAPES_KEPT:
        answers[shape] = answer
    return answer


def _has_reasoning(turn: dict) -> bool:
    """Whether `turn` has reasoning in `reasoning_content` (text that is not blank), which
    the probe marks as it marks the content (`reasoning` is copied there, as vLLM does:
    `_with_reasoning_as_served`)."""
    reasoning = turn.get("reasoning_content")
    return isinstance(reasoning, str) and bool(reasoning.strip())


def _turn_codes(count: int) -> list[str]:
    """A code for each of `count` turns, all of one length, the fewest letters of
    `_CODE_LETTERS` that number them: a turn's end in the probe is as long as any other's."""
    base, width = len(_CODE_LETTERS), 1
    while base**width < count:
        width += 1
    codes = []
    for index in range(count):
        letters = []
        for _ in range(width):
            index, digit = divmod(index, base)
            letters.append(_CODE_LETTERS[digit])
        codes.append("".join(reversed(letters)))
    return codes


def _content_shape(content: Any) -> bool | None:
    """What of a turn's content a template's branches read: None where it is null, False
    where it is empty, True where it holds text."""
    return None if content is None else bool(content)


def _calls_shape(calls: Any) -> tuple:
    """The layout of a turn's tool calls that a template's branches read: each call's keys,
    its function's, and its arguments' type and emptiness (no values), JSON text of an
    object (served parsed) told from other text."""
    if holds_nothing(calls):
        return ()
    if not _is_call_list(calls):  # refused by `checked_turns`; the template decides here
        return (type(calls).__name__, repr(calls))
    shape = []
    for call in calls:
        inner = _function_of(call)
        arguments = inner.get("arguments")
        served = served_arguments(arguments)
        kind = f"{type(arguments).__name__}, served {bool(served)}"
        shape.append((tuple(call), tuple(inner), kind, bool(arguments)))
    return tuple(shape)


def _probe_call(call: dict, number: int) -> tuple[dict, tuple[str, ...]]:
    """`call` with its function's name and its arguments (a dict, or JSON text) replaced by
    markers numbered `number`, and the markers put in (lower case, as the text is searched).
    Arguments served as `{}` (`served_arguments`: null, "", text of no object) stay as they
    are: there is nothing of them to leave out; every call has a name (`_check_tool_calls`)."""
    function = call.get("function")
    inner = dict(_function_of(call))
    inner["name"] = _CALL_NAME.format(number)
    markers = [inner["name"]]
    arguments = inner.get("arguments")
    served = served_arguments(arguments)
    if served != {}:
        marker = _CALL_ARGUMENT.format(number)
        markers.append(marker)
        probed = {marker: marker}
        # an object, or JSON text of one in the form given (`checked_turns` refused other
        # text holding a value)
        inner["arguments"] = probed if isinstance(arguments, dict) else json.dumps(probed)
    probed_call = {**call, "function": inner} if isinstance(function, dict) else inner
    return probed_call, tuple(markers)


def tokenize_chat(tokenizer: Any, messages: list[dict], limit: RowLimit) -> Example:
    """A conversation's tokens with the loss on the tokens verl's MultiTurnSFTDataset trains:
    each assistant turn's tokens after the template's generation prompt, through its end of
    turn, whatever `{% generation %}` blocks the template has (verl reads none). A turn's
    tokens are what the conversation up to it, rendered with the generation prompt, leaves
    of the conversation rendered through it (`_assistant_mask`). Where a template renders a
    turn otherwise once later turns follow, prefixes cannot tell the turns apart: the row
    trains as verl trains it (`verl_turns.verl_row`) where verl's turns rendered one at a
    time are the chat rendered whole (Qwen3's `[user, assistant, user]`), and is refused
    where they are not either, as verl refuses it. A row that trains otherwise than in verl
    says how (`Example.unlike_verl`): Qwen3's `[user, assistant]`, which verl refuses, trains
    here as the template renders it whole, its empty think block a target."""

    def rendered(turns: list[dict], add_generation_prompt: bool) -> dict[str, Any]:
        return chat_ids(tokenizer, turns, limit, add_generation_prompt=add_generation_prompt)

    whole = rendered(messages, False)
    refuse_unrendered_tool_calls(tokenizer, messages, limit, whole["text"])
    refuse_unrendered_turns(tokenizer, messages, limit, whole["text"])
    full = whole["input_ids"]
    try:
        ids = lambda turns, prompt: rendered(turns, prompt)["input_ids"]  # noqa: E731
        verl = verl_row(ids, messages, full, _template_prompts(tokenizer, ids))
    except ChatFormatError:  # verl's __getitem__ raises on the row
        verl = NOT_RENDERED
    try:
        mask = _assistant_mask(tokenizer, messages, full, rendered, limit.template)
    except _NotByPrefix as split:
        if not verl.trained:
            why = (
                "its turns rendered one at a time are not the chat rendered whole (its sanity"
                " check, data.ignore_input_ids_mismatch false)"
                if verl.input_ids
                else "the template cannot render each of its turns alone"
            )
            raise ChatFormatError(
                f"{limit.template} does not render conversations prefix by prefix (turn"
                f" {split.turn} renders otherwise once later turns follow), so its assistant"
                f" turns cannot be told apart; verl's MultiTurnSFTDataset refuses such a chat"
                f" too: {why}"
            ) from None
        return Example(full, verl.loss_mask)
    return Example(full, mask, unlike_verl=unlike_verl(verl, mask))


# Each tokenizer's `TemplatePrompts`, found at its first row (not kept past the tokenizer)
_PROMPTS: weakref.WeakKeyDictionary[Any, TemplatePrompts] = weakref.WeakKeyDictionary()


def _template_prompts(
    tokenizer: Any, ids: Callable[[list[dict], bool], list[int]]
) -> TemplatePrompts:
    """`template_prompts` of `tokenizer`'s chat template, rendered once per tokenizer."""
    prompts = _PROMPTS.get(tokenizer)
    if prompts is None:
        prompts = _PROMPTS[tokenizer] = template_prompts(ids)
    return prompts


class _NotByPrefix(ChatFormatError):
    """Assistant turn `turn` (1-based) of a chat renders otherwise once later turns follow
    (`tokenize_chat` catches it and tells whether verl refuses the row too)."""

    def __init__(self, turn: int) -> None:
        super().__init__(f"assistant turn {turn} renders otherwise once later turns follow")
        self.turn = turn


Rendered = Callable[[list[dict], bool], dict[str, Any]]


def _assistant_mask(
    tokenizer: Any, messages: list[dict], full: list[int], rendered: Rendered, template: str
) -> list[int]:
    """The loss mask of `full` (`messages` rendered whole) from growing prefixes: 1 on each
    assistant turn's tokens after the generation prompt. _NotByPrefix where a prefix through
    an assistant turn is not the start of `full`; ChatFormatError where the generation
    prompt is not how the template starts an assistant turn."""
    mask = [0] * len(full)
    for index, turn in enumerate(messages):
        if turn["role"] != "assistant":
            continue
        through = rendered(messages[: index + 1], False)
        if full[: len(through["input_ids"])] != through["input_ids"]:
            raise _NotByPrefix(index + 1)
        if index:
            prompt = rendered(messages[:index], True)
        else:
            prompt = _opening_prompt(tokenizer, through, rendered, template)
        start = _reply_start(tokenizer, prompt, through)
        if start is None:
            raise ChatFormatError(
                f"{template}: its generation prompt (add_generation_prompt=True) is not"
                f" how it renders the start of assistant turn {index + 1} (DeepSeek-R1's adds"
                " `<think>`, which its turns leave out), so that turn's tokens cannot be told"
                " apart; make the generation prompt the start of its assistant turns"
            )
        for position in range(start, len(through["input_ids"])):
            mask[position] = 1
    return mask


def _opening_prompt(
    tokenizer: Any, through: dict[str, Any], rendered: Rendered, template: str
) -> dict[str, Any]:
    """What precedes the reply of an assistant turn that opens the chat (a greeting), as
    `rendered` gives it (`text`, `input_ids`). The conversation before it is empty, no
    text, and is not rendered: Qwen2.5's and Llama 3.1's templates read `messages[0]` and
    raise on an empty list, which refused such a row as a template that cannot render it.
    The turn's own rendering, `through`, is read up to the end of the template's generation
    prompt (what `add_generation_prompt=True` adds to a chat of one empty user turn, as verl
    finds it), so that the system prompt a template puts first is no target. verl trains
    it: its mask leaves out only the generation prompt's length of the turn's first
    tokens, which there are the system prompt's (`verl_turns.MASKED`)."""
    empty = [{"role": "user", "content": ""}]
    bare, prompted = rendered(empty, False)["text"], rendered(empty, True)["text"]
    generation = prompted[len(bare) :] if prompted.startswith(bare) else ""
    at = through["text"].find(generation) if generation else -1
    if at < 0:
        raise ChatFormatError(
            f"{template}: the chat opens with an assistant turn, and the template's generation"
            f" prompt ({generation!r}) is not in how it renders that turn, so its reply cannot"
            " be told apart; open the chat with a user or system turn"
        )
    text = through["text"][: at + len(generation)]
    return {"text": text, "input_ids": list(_encoded(tokenizer, text)["input_ids"])}


def _reply_start(tokenizer: Any, prompt: dict[str, Any], through: dict[str, Any]) -> int | None:
    """The first token of an assistant turn's reply in `through` (the conversation rendered
    through that turn) after `prompt` (rendered up to it with the generation prompt); None
    where the generation prompt's text is not how the turn's text starts. The text decides,
    not the tokens: a reply that starts with a newline after ChatML's `assistant\n` merges
    the two into one token, so the prompt's ids are no prefix of the turn's; the reply is
    then the tokens that start at or after the prompt's end. A turn that renders to its
    generation prompt alone has no reply, as in verl (which masks the generation prompt's
    tokens): it was refused as a generation prompt the turn does not start with."""
    text, turn_text = prompt["text"], through["text"]
    if not turn_text.startswith(text):
        return None
    ids, turn_ids = prompt["input_ids"], through["input_ids"]
    if turn_ids[: len(ids)] == ids:
        return len(ids)
    offsets = tokenizer(turn_text, add_special_tokens=False, return_offsets_mapping=True)[
        "offset_mapping"
    ]
    return next((i for i, (begin, _end) in enumerate(offsets) if begin >= len(text)), None)


# what lets an over-long SFT row through, and what verl did with it: its sft_trainer at
# pad_mode=no_padding (its default) keeps the first data.max_length tokens, even at its
# data.truncation=error (verl_truncation), so a dataset that trained there would stop here
TRUNCATION_REMEDY = (
    "data.truncation=left|right; verl's sft_trainer at its default pad_mode=no_padding cut"
    " such rows from the right: data.truncation=right does what it did"
)


def truncate(example: Example, max_length: int, mode: str, where: str) -> Example:
    """`error`: refuse; `left`: keep the last max_length tokens; `right`: keep the first."""
    if len(example) <= max_length:
        return example
    if mode == "error":
        raise ChatFormatError(
            f"{where}: {len(example)} tokens > data.max_length={max_length} (raise it or set"
            f" {TRUNCATION_REMEDY})"
        )
    if mode == "left":
        return replace(
            example,
            input_ids=example.input_ids[-max_length:],
            loss_mask=example.loss_mask[-max_length:],
        )
    if mode == "right":
        return replace(
            example,
            input_ids=example.input_ids[:max_length],
            loss_mask=example.loss_mask[:max_length],
        )
    raise ValueError(f"data.truncation: unknown mode {mode!r}")
