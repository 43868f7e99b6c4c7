"""What a template that raises on a chat's tool-calling turn takes instead.

Templates differ in the form of a calling turn they accept: one may raise on a null
content, which OpenAI's API writes for a turn that only calls tools, and render "" (vLLM
hands a null content to a template reading text as "", to one reading parts, Gemma 3's,
as no parts: `chat_content_parts`, so only the first kind gets here); DeepSeek-R1-Distill's
joins a call's arguments to text and raises TypeError on an object, the form other
templates need. Such a row was refused with the template's own message, naming no turn and
no remedy. Here the row is rendered once more in the other form, only where it failed, and
where that renders the refusal names the turn and the form to store.
"""

from __future__ import annotations

import json
from collections.abc import Callable

Rendered = Callable[[list[dict]], "str | None"]


def unrenderable_call_turn(rendered: Rendered, turns: list[dict]) -> tuple[str, str, str] | None:
    """For `turns` that the template raised on: the first calling turn (`turn N, role
    'assistant'`), what the template does not take, and what to store instead, where
    `rendered` (the template's bounded render, None where it fails) renders the chat with
    that form changed in every calling turn, each call's name in the text (DeepSeek-R1-
    Distill's renders a "" content without its calls); None where no change renders it."""
    calling = [index for index, turn in enumerate(turns) if _calls_of(turn)]
    objects = [index for index in calling if _has_object_arguments(turns[index])]
    if objects and _renders_calls(rendered, [with_text_arguments(turn) for turn in turns]):
        return (
            _turn_name(turns, objects[0]),
            "takes a call's arguments only as JSON text, not as an object",
            "store each call's arguments as JSON text ('{\"city\": \"Oslo\"}'), as OpenAI's"
            " API writes them",
        )
    nulls = [index for index in calling if turns[index]["content"] is None]
    if nulls and _renders_calls(rendered, [_with_empty_content(turn) for turn in turns]):
        return (
            _turn_name(turns, nulls[0]),
            "takes no null content in a turn that calls tools",
            "write the content as '' (the turn trains with its calls so)",
        )
    return None


def _renders_calls(rendered: Rendered, turns: list[dict]) -> bool:
    """Whether `turns` render, with the name of each of their calls in the text."""
    text = rendered(turns)
    names = [_inner(call).get("name") for turn in turns for call in _calls_of(turn)]
    return text is not None and all(isinstance(name, str) and name in text for name in names)


def _turn_name(turns: list[dict], index: int) -> str:
    return f"turn {index + 1}, role {turns[index]['role']!r}"


def _calls_of(turn: dict) -> list[dict]:
    """A turn's calls, each a dict (`[]` for none, or for calls the chat checks refuse)."""
    calls = turn.get("tool_calls")
    if not isinstance(calls, (list, tuple)) or not all(isinstance(call, dict) for call in calls):
        return []
    return list(calls)


def _with_empty_content(turn: dict) -> dict:
    """`turn` with content "" where it is a calling turn's null."""
    return {**turn, "content": ""} if turn["content"] is None and _calls_of(turn) else turn


def _inner(call: dict) -> dict:
    function = call.get("function")
    return function if isinstance(function, dict) else call


def _has_object_arguments(turn: dict) -> bool:
    return any(isinstance(_inner(call).get("arguments"), dict) for call in _calls_of(turn))


def with_text_arguments(turn: dict) -> dict:
    """`turn` with each call's object arguments written as JSON text."""
    if not _has_object_arguments(turn):
        return turn
    calls = []
    for call in _calls_of(turn):
        inner = _inner(call)
        arguments = inner.get("arguments")
        if isinstance(arguments, dict):
            text = json.dumps(arguments, ensure_ascii=False, default=str)
            inner = {**inner, "arguments": text}
            call = {**call, "function": inner} if isinstance(call.get("function"), dict) else inner
        calls.append(call)
    return {**turn, "tool_calls": calls}
