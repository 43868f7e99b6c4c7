"""A RoPE config that transformers' own validator calls invalid is refused, not trained with.

transformers 5 checks a config's `rope_parameters` each time it builds the config
(`RotaryEmbeddingConfigMixin.validate_rope`), but only logs what it finds, and has no
setting that makes it raise: a yarn `factor` of -1 or an unknown `rope_type` trained, and
the same warning was printed once per config built, four times a run. Its findings are
used here as they are: each config is built with them held back (`rope_verdicts_held`),
and the final one is validated again, its first finding refused in one line naming the
field (exit 2). What the validator logs through `warning_once` is advice, not a finding,
and is printed as before where the config is taken: a yarn factor other than
max_position_embeddings / original_max_position_embeddings is what Qwen3's own model
card sets.

The validator checks no value's type where it checks no range: a string `rope_theta` passed
it and failed while the model built. Each value is checked against the type transformers
declares for it (`RopeParameters`), an int counting as a float as the validator allows.

Refused are only findings of a field's own value (`_REFUSED`: "factor field must be a float
or int >= 1", a rope_type no validator knows): transformers computes RoPE from that value.
Its other findings change nothing it computes and stay warnings, said once a process: a key
the rope type does not read ("Unrecognized keys": a yarn dict's `finetuned`), and one field
against another (Llama 3's original_max_position_embeddings not under
max_position_embeddings, which its frequencies never read). Refusing them stopped runs of
such models from starting or resuming.
"""

from __future__ import annotations

import contextlib
import logging
import re
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from mfsdp_ckpt.check.printable import cut_to, error_line
from trainer.config import ConfigError

ROPE_LOGGER = "transformers.modeling_rope_utils"
# Where the validator's own findings are logged from (its methods), besides `warning_once`
_VALIDATOR = re.compile(r"_validate_\w+|validate_rope|_check_received_keys")
# The validator's findings refused: a field's own value wrong (its type or range), a rope_type
# no validator knows. Not: "must be greater/less than" another field, "Unrecognized keys".
_REFUSED = re.compile(
    r"`rope_parameters`'s \w+ field must be (?!greater than|less than)|Missing validation function"
)
# Findings let through, said once a process (as transformers' own warning)
_SAID: set[str] = set()
# Where a config.json or model.overrides holds RoPE settings: transformers reads the
# older `rope_scaling` in place of `rope_parameters` when both are there
_ROPE_FIELDS = ("rope_scaling", "rope_parameters")


class _Held(logging.Filter):
    """Holds back what the RoPE validator logs: its findings (kept as text) and its advice
    (kept as records, to be let through)."""

    def __init__(self) -> None:
        super().__init__()
        self.findings: list[str] = []
        self.advice: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if _VALIDATOR.fullmatch(record.funcName) and _REFUSED.search(record.getMessage()):
            self.findings.append(record.getMessage())
        else:
            self.advice.append(record)
        return False


@contextlib.contextmanager
def rope_verdicts_held() -> Iterator[list[str]]:
    """While a config is built: the RoPE validator's findings are collected (yielded), not
    printed; `refuse_invalid_rope` of the final config refuses them in one line. Its advice
    is printed after a build it found nothing wrong with, and dropped with a config it
    refuses: the refusal is the one line."""
    logger = logging.getLogger(ROPE_LOGGER)
    held = _Held()
    logger.addFilter(held)
    try:
        yield held.findings
    finally:
        logger.removeFilter(held)
    if not held.findings:
        for record in held.advice:
            if record.getMessage() not in _SAID:
                _SAID.add(record.getMessage())
                logger.handle(record)


def refuse_invalid_rope(
    config: Any, overrides: Mapping[str, Any], origin: str, written: Mapping[str, Any]
) -> None:
    """ConfigError naming the field of the first thing wrong with `config`'s RoPE
    parameters: in `overrides` (model.overrides) when they set it, else in `origin` (the
    config.json, or the key, the rest of the config came from), whose fields as written
    (before transformers merged and renamed them) are `written`."""
    found = _rope_problem(config)
    if found is None:
        return
    key, reason = found
    field = _holder(overrides, key)
    if field is not None:
        where = f"model.overrides.{field}"
    else:
        where = f"{origin}: {_holder(written, key) or 'rope_parameters'}"
    raise ConfigError(f"{where}: transformers' RoPE validation refuses it ({reason})")


def _rope_problem(config: Any) -> tuple[str | None, str] | None:
    """(the RoPE key at fault, or None where none is named; what is wrong) for `config`,
    None when transformers finds nothing wrong with its RoPE parameters."""
    parameters = _rope_dicts(config)
    for rope in parameters:
        for key, value in rope.items():
            wrong = _type_problem(key, value)
            if wrong is not None:
                return key, wrong
    keys = [key for rope in parameters for key in rope]
    with rope_verdicts_held() as said:
        try:
            config.validate_rope()
        except (KeyError, TypeError, ValueError) as err:  # what it raises, or fails on
            reason = error_line(err, joined=True)
            return _last_named(keys, reason), reason
    return (_last_named(keys, said[0]), said[0]) if said else None


def _rope_dicts(config: Any) -> list[dict[str, Any]]:
    """The config's RoPE parameter dicts: one, or one per layer type when nested so."""
    rope = getattr(config, "rope_parameters", None)
    if not isinstance(rope, dict):
        return []
    # transformers before 5.19 has no `nested_rope_parameter_keys`: a dict per layer type
    nested_keys = getattr(config, "nested_rope_parameter_keys", None)
    nested = (
        nested_keys(rope)
        if nested_keys is not None
        else [key for key, value in rope.items() if isinstance(value, dict)]
    )
    found = [rope[key] for key in nested] if nested else [rope]
    return [each for each in found if isinstance(each, dict)]


def _type_problem(key: str, value: Any) -> str | None:
    """Why `value` is not of the type `RopeParameters` declares for `key` (None when it is,
    or when no type is declared: the validator names an unknown key)."""
    from huggingface_hub.dataclasses import type_validator
    from transformers.modeling_rope_utils import RopeParameters

    declared = typing.get_type_hints(RopeParameters).get(key)
    if declared is None:
        return None
    for candidate in (value, _floats_for_ints(value)):
        try:
            type_validator(key, candidate, declared)
            return None
        except TypeError:
            continue
    return f"{key} is {cut_to(repr(value), 80)}, not {declared}"


def _floats_for_ints(value: Any) -> Any:
    """`value` with each int a float, in lists too: the validator takes `float or int`
    where `RopeParameters` declares float. A bool stays a bool."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, list):
        return [_floats_for_ints(each) for each in value]
    return value


def _last_named(keys: list[str], message: str) -> str | None:
    """The key that transformers' `message` names last: its messages name the field at
    fault last ("Unrecognized keys ... for 'rope_type'='default': {'foo'}") or alone."""
    spots = [
        (match.start(), key)
        for key in keys
        for match in re.finditer(rf"(?<!\w){re.escape(key)}(?!\w)", message)
    ]
    return max(spots)[1] if spots else None


def _holder(fields: Mapping[str, Any], key: str | None) -> str | None:
    """Where in `fields` (a config.json's, or model.overrides) the RoPE `key` is set:
    `rope_scaling.factor`, `rope_parameters.rope_type`, a top-level `rope_theta`; for no
    key, the RoPE field it has. None when `fields` sets none of it."""
    for name in _ROPE_FIELDS:
        rope = fields.get(name)
        if not isinstance(rope, dict):
            continue
        if key is None:
            return name
        for spelled in (key, "type") if key == "rope_type" else (key,):
            if spelled in rope:
                return f"{name}.{spelled}"
    return key if key is not None and key in fields else None
