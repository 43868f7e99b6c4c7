"""Tool-call arguments as a served model's chat template sees them.

OpenAI's chat format stores a call's `function.arguments` as JSON text. vLLM's chat
completions (`_postprocess_messages` in vllm/renderers/chat_utils.py), following
transformers' advice to templates, parse that text into an object before rendering, so
a template writing `arguments | tojson` (Hermes', Llama 3.1's, Qwen2.5's) shows the served
model `"arguments": {"city": "Oslo"}`. Passing the text on trained, and prompted, the model
with `"arguments": "{\\"city\\": \\"Oslo\\"}"`, a quoted string the model then learned to
emit and vLLM's tool parsers returned as a string. Text that is no JSON object stays text
(the chat checks judge how the template writes it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def parsed_object(text: Any) -> dict | None:
    """The JSON object that `text` holds whole, as `json.loads` reads it (what vLLM reads);
    None for anything else: not text, not JSON, JSON of another type, or nested deeper than
    Python's parser goes (RecursionError). Bounded by the text, which a row's limit bounds."""
    if not isinstance(text, str):
        return None
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def call_with_parsed_arguments(call: dict) -> dict:
    """`call` with arguments that are JSON text of an object given as that object, in
    OpenAI's `function` or in the flat form some templates read; else `call` itself."""
    function = call.get("function")
    inner = function if isinstance(function, dict) else call
    parsed = parsed_object(inner.get("arguments"))
    if parsed is None:
        return call
    inner = {**inner, "arguments": parsed}
    return {**call, "function": inner} if isinstance(function, dict) else inner


def with_parsed_arguments(turns: Iterable[dict]) -> list[dict]:
    """`turns` with each tool call's JSON-text object arguments parsed
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
