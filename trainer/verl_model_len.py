"""verl's `actor_rollout_ref.rollout.max_model_len`: taken only where it changes nothing here.

The engine here sizes its context from `data.max_prompt_length` + `rollout.max_response_length`,
so the key is ignored. In verl it is a cap: its rollout server clamps each request's
`max_tokens` to max_model_len minus the prompt's length, so a max_model_len below prompt +
response lengths gives long prompts shorter responses there than here. Such a value is
refused, naming the response length that trains as verl does; null and any value at least
the sum are ignored with a note.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from trainer.shell_unexpanded import UNEXPANDED

MAX_MODEL_LEN = "actor_rollout_ref.rollout.max_model_len"
# where a run gives each length, first found wins: mfsdp's key, verl's, the rollout's copy
_PROMPT = ("data.max_prompt_length", "actor_rollout_ref.rollout.prompt_length")
_RESPONSE = (
    "rollout.max_response_length",
    "data.max_response_length",
    "actor_rollout_ref.rollout.response_length",
)


def _default(cls: type, dotted: str) -> Any:
    """The default of dotted key `dotted` in config class `cls`."""
    kind: Any = cls
    *sections, last = dotted.split(".")
    for part in sections:
        kind = typing.get_type_hints(kind)[part]
    return {field.name: field for field in dataclasses.fields(kind)}[last].default


def _length(cls: type, given: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """The run's value of the first of `keys` it gives, else mfsdp's default of the first."""
    return next((given[key] for key in keys if key in given), _default(cls, keys[0]))


def short_model_len(cls: type, value: Any, given: dict[str, Any]) -> str | None:
    """Why max_model_len `value` is refused in the run whose keys are `given`, or None where
    it is ignored (null, or at least prompt + response lengths). A length the run gives as
    no whole number (an unresolved reference) is left to its own key's check. A value
    still holding shell syntax (`$MAXLEN`) is known only when the script runs, as any other
    key's; a float of a whole value (3072.0) is that number of tokens."""
    if value is None:
        return None
    prompt, response = _length(cls, given, _PROMPT), _length(cls, given, _RESPONSE)
    if isinstance(value, str) and UNEXPANDED.search(value):
        return (
            "known only when the script runs (it is ignored at null or at least"
            f" data.max_prompt_length + rollout.max_response_length, {prompt} + {response}):"
            " set it here"
        )
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        return "max_model_len is a whole number of tokens, or null"
    lengths = (prompt, response)
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in lengths):
        return None
    if value >= prompt + response:
        return None
    fix = (
        f"lower rollout.max_response_length (verl's data.max_response_length) to at most"
        f" {value - prompt}"
        if value > prompt
        else "it leaves no room for a response: raise it"
    )
    return (
        f"it is below data.max_prompt_length + rollout.max_response_length ({prompt} +"
        f" {response}): verl caps each response at max_model_len minus its prompt's length,"
        f" the engine here at rollout.max_response_length; {fix}, and set max_model_len to"
        " null or at least the sum"
    )
