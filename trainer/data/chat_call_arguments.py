"""Tool-call arguments as a served model's chat template sees them.

OpenAI's chat format stores a call's `function.arguments` as JSON text. vLLM's chat
completions (`_postprocess_messages` in vllm/renderers/chat_utils.py), following
transformers' advice to templates, parse that text into an object before rendering, so
a template writing `arguments | tojson` (Hermes', Llama 3.1's, Qwen2.5's) shows the served
model `"arguments": {"city": "Oslo"}`. Passing the text on trained, and prompted, the model
with `"arguments": "{\\"city\\": \\"Oslo\\"}"`, a quoted string the model then learned to
emit and vLLM's tool parsers returned as a string. Arguments that hold no object (null,
missing, "", text that is not JSON, JSON of another type: "[1, 2]", "\\"Oslo\\"") vLLM serves
as `{}`, so they train and prompt as `{}` too: kept as text, a row trained
`"arguments": ""`, which the served model never sees. Text `json.loads` fails on otherwise
(nested deeper than its parser goes), on which vLLM fails the request, is refused
(`checked_turns`): kept as text, it trained a call no served model is shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def served_arguments(arguments: Any) -> dict | None:
    """A call's arguments as vLLM 0.32's `_postprocess_messages` hands them to the template:
    an object as it is, JSON text of an object parsed, and `{}` for anything holding none
    (null, "", a missing key, text that is not JSON, JSON or a value of another type); None
    where vLLM fails the request instead (text nested deeper than the parser goes)."""
    if not arguments:
        return {}
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str):
        return {}
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        return {}
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else {}


def call_with_parsed_arguments(call: dict) -> dict:
    """`call` with its arguments as vLLM serves them (`served_arguments`), in OpenAI's
    `function` or in the flat form some templates read; `call` itself where they are
    served as they are, or not served at all."""
    function = call.get("function")
    inner = function if isinstance(function, dict) else call
    parsed = served_arguments(inner.get("arguments"))
    if parsed is None or ("arguments" in inner and parsed is inner["arguments"]):
        return call
    inner = {**inner, "arguments": parsed}
    return {**call, "function": inner} if isinstance(function, dict) else inner


def with_parsed_arguments(turns: Iterable[dict]) -> list[dict]:
    """`turns` with each tool call's arguments as vLLM serves them
    (`call_with_parsed_arguments`); a turn with no such call is the same dict."""
    served = []
    for turn in turns:
        calls = turn.get("tool_calls")
        if isinstance(calls, (list, tuple)) and any(isinstance(call, dict) for call in calls):
            parsed = [
                call_with_parsed_arguments(call) if isinstance(call, dict) else call
                for call in calls
            ]
            if parsed != list(calls):
                turn = {**turn, "tool_calls": parsed}
        served.append(turn)
    return served
