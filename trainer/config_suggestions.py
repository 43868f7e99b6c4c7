"""The unknown-key error of the config loader: which keys a key that no section has may be
meant for, in one line.

A typo must name what was meant, not only that it is wrong: the key's own section is
searched (`optim.lrr`: optim.lr), with verl's names there shown with mfsdp's key
(`trainer.save_freqs`: trainer.save_freq (checkpoint.save_every here)), then the other
sections (`trainer.lr`: optim.lr), and an unknown section name is mended (`optimizer.lr`).
Kept out of `trainer.config`, whose loader calls `unknown_key_message` on the first unknown
key it finds; `trainer.verl_keys` ranks verl's unmapped keys with `close_keys`. A key of a
few named values (`model.shape`, `model.attn_implementation`, `checkpoint.resume`) names the
one a mistyped value was meant for with `closest_choice`.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Collection, Sequence
from typing import Any, cast

from trainer import verl_keys
from trainer.yaml_colon_keys import glued_value_hint


def unknown_key_message(
    cls: type,
    prefix: str,
    key: str,
    source: str,
    command: str,
    value: Any = None,
    root: type | None = None,
) -> str:
    """The unknown key `prefix + key` of section `cls`, with the keys it may be meant for:
    the section's, and the verl keys `mfsdp train <command>` takes there, each shown with its
    key here (`trainer.save_freq (checkpoint.save_every here)`): a verl user's typo was
    matched against mfsdp's names alone (`trainer.save_freqs`: "did you mean trainer.seed").
    Given the key's `value` and the whole config's class `root`, also: an unknown section
    name holding keys is matched with the keys under it (`optimizer.lr`: optim.lr, where
    `optimizer` alone got verl's `optim.optimizer` and `optim`, whose own error followed),
    and a key of another section is named (`trainer.lr`, `trainer.lrr`: optim.lr)."""
    full = f"{prefix}{key}"
    glued = glued_value_hint(key)
    if glued is not None:
        return f"{source}: {full}: {glued}"
    other = _other_commands_key(full, command)
    if other is not None:
        return f"{source}: unknown config key '{full}': {other}"
    verl = verl_keys.names(command)
    written = _first_leaf_key(full, value)
    if root is not None and written != full:
        meant = _with_section_mended(root, written, prefix.count("."), verl)
        meant = meant or _in_other_sections(root, written, found_in_own=False)
        if meant:  # the key refused is still the unknown name, the hint the whole key
            return _unknown_key_line(source, full, meant, verl)
    # a hint never names the key refused: `data.apply_chat_template_kwargs.x=` was
    # refused as `data.apply_chat_template_kwargs`, "did you mean" that same key
    others = [name for name in verl if name.startswith(prefix) and name != full]
    candidates = [k for k in all_keys(cls, prefix) if k != full]
    inert = {name for name in others if verl[name] is None}
    close = close_keys(full, candidates, others, inert)
    if root is not None:
        close = _with_other_sections(root, full, close, candidates)
    close = _meant_for(full, all_keys(root or cls)) + close
    return _unknown_key_line(source, full, list(dict.fromkeys(close))[:3], verl)


def _other_commands_key(full: str, command: str) -> str | None:
    """What the key `full` is where the other training command's config has it and this
    command's does not: "a section of mfsdp train grpo, not sft" (`rollout`), "a key of
    ..." (`data.max_prompt_length` given to sft, `data.messages_key` to grpo); None else.
    Likeness alone offered the nearest spelling, a key of no kin ("did you mean
    data.max_length" for GRPO's data.max_prompt_length). Read from both commands' config
    classes, so a key added to one is named without a list to keep."""
    from trainer.config import SFTConfig
    from trainer.grpo.config import GRPOConfig

    classes: dict[str, type] = {"sft": SFTConfig, "grpo": GRPOConfig}
    if command not in classes:
        return None
    for other, cls in classes.items():
        if other != command and verl_keys.is_native(cls, full):
            section = any(key.startswith(f"{full}.") for key in all_keys(cls))
            return f"a {'section' if section else 'key'} of mfsdp train {other}, not {command}"
    return None


# mfsdp's key for what other trainers name a model's dtype (`model.dtype`, HF's
# `torch_dtype`, verl's `model_dtype`): no spelling of it is alike, and the verl keys that
# were (`model.lora.dtype`) set nothing here
DTYPE_KEY = "strategy.mixed_precision"


def _meant_for(given: str, keys: list[str]) -> list[str]:
    """The key of `keys` that `given` names in another trainer's words, which likeness
    cannot find: a dtype-like key is strategy.mixed_precision."""
    leaf = given.rsplit(".", 1)[-1]
    dtype_like = leaf in ("dtype", "precision") or leaf.endswith("_dtype")
    return [DTYPE_KEY] if dtype_like and DTYPE_KEY in keys and given != DTYPE_KEY else []


def _unknown_key_line(source: str, key: str, close: list[str], verl: dict[str, str | None]) -> str:
    """The error for the unknown `key`, naming the `close` keys (verl's with its key here,
    unless it is that same key: `model.lora_rank` is both)."""
    shown = [
        verl_keys.shown_name(name, verl[name]) if verl.get(name, name) != name else name
        for name in close
    ]
    hint = f"; did you mean {', '.join(shown)}?" if shown else ""
    return f"{source}: unknown config key '{key}'{hint}"


def _first_leaf_key(key: str, value: Any) -> str:
    """`key` with the names down to the first value under it, where it holds a mapping: the
    key written under an unknown section name (`optimizer: {lr: 1e-3}` is `optimizer.lr`)."""
    while isinstance(value, dict) and value:
        name, value = next(iter(value.items()))
        key = f"{key}.{name}"
    return key


def _with_section_mended(
    root: type, written: str, depth: int, verl: dict[str, str | None]
) -> list[str]:
    """Keys of `root` or verl's that `written` may be meant for, its part at `depth` (an
    unknown section name) mended to a close one: the keys that are then exactly `written`
    (`optimizer.lr`: optim.lr; `dataa.max_length`: data.max_length), else the keys close to
    it in the mended section (`optimizer.lrr`: optim.lr). The whole key matched against
    every key found `model.lora_rank` for `optimizer.lr` (lr: its initials)."""
    parts = written.split(".")
    head, rest = parts[:depth], parts[depth + 1 :]
    keys = all_keys(root) + list(verl)
    split = [key.split(".") for key in keys]
    names = {key[depth] for key in split if len(key) > depth and key[:depth] == head}
    sections = [".".join([*head, name]) for name in _close(parts[depth], sorted(names))]
    mended = [".".join([section, *rest]) for section in sections]
    exact = [key for key in mended if key in verl or verl_keys.is_native(root, key)]
    if exact:
        return exact
    near = [
        found
        for section, key in zip(sections, mended)
        for found in close_keys(
            key,
            [k for k in all_keys(root) if k.startswith(f"{section}.")],
            [k for k in verl if k.startswith(f"{section}.")],
        )
    ]
    return list(dict.fromkeys(near))[:3]


def _with_other_sections(root: type, given: str, close: list[str], own: list[str]) -> list[str]:
    """`close` (keys of the section of `given`, `own`, and verl's names there) with the keys
    of other sections `given` may be meant for put first, after only the verl names closer
    to it than each of them: a verl name alike is no key of the section's own (`trainer.
    learning_rate` is optim.lr, not verl's trainer.total_training_steps), and a verl key
    misspelt is that key first (`trainer.save_freqs`: trainer.save_freq, which names
    checkpoint.save_every)."""
    elsewhere = _in_other_sections(root, given, found_in_own=any(key in own for key in close))
    if not elsewhere:
        return close
    nearest = max(_likeness(given, key) for key in elsewhere)
    closer = [key for key in close if key not in own and _likeness(given, key) > nearest]
    return closer + elsewhere + close


def _in_other_sections(root: type, given: str, found_in_own: bool) -> list[str]:
    """Keys of `root` outside the section of `given` that it may be meant for: those of the
    same name (`trainer.lr`: optim.lr), and, where its own section has nothing close, those
    of a name close to `given`'s or that it abbreviates (`trainer.lrr`,
    `trainer.learning_rate`: optim.lr). Initials alone are no match where the section has
    one: `model.lora_rnk` is `model.lora_rank`, not `optim.lr`."""
    section, _, leaf = given.rpartition(".")
    keys = [key for key in all_keys(root) if not (section and key.startswith(f"{section}."))]
    by_name: dict[str, list[str]] = {}
    for key in keys:
        by_name.setdefault(key.rsplit(".", 1)[-1], []).append(key)
    names = [name for name in by_name if name == leaf]
    if not found_in_own:
        names += [name for name in by_name if _abbreviates(name, leaf)]
        names += difflib.get_close_matches(leaf, list(by_name), n=3, cutoff=0.6)
    return list(dict.fromkeys(key for name in names for key in by_name[name]))


def close_keys(
    given: str,
    candidates: list[str],
    others: Sequence[str] = (),
    inert: Collection[str] = (),
) -> list[str]:
    """Up to three of the dotted `candidates` and `others` (verl's names) that `given` may be
    meant for, an `other` first only where it is closer to `given` than every candidate found
    (`optim.warmup` is mfsdp's `optim.warmup_steps` before verl's `optim.warmup_style`), and
    left out where it is far less like `given` than one found (`NOISE`). An `other` in
    `inert` (a verl key that sets nothing here) never comes before a candidate: following
    it trains as if it were not given."""
    found = _close(given, candidates)
    nearest = max((_likeness(given, key) for key in found), default=0.0)
    closer: list[str] = []
    rest: list[str] = []
    for key in _close(given, [other for other in others if other not in candidates]):
        likeness = _likeness(given, key)
        if likeness > nearest and key not in inert:
            closer.append(key)
        elif likeness >= nearest - NOISE:
            rest.append(key)
    return (closer + found + rest)[:3]


# how much less like the key typed than an mfsdp key found a verl name may be and still be
# named after it: `model.pth` is model.path (0.95), and verl's Megatron model.lora.alpha
# (0.64, the section's name shared) was named beside it as if it were meant too
NOISE = 0.25


def _likeness(given: str, key: str) -> float:
    """How alike two dotted keys are, 1.0 where their last parts are the same or one
    abbreviates the other's (a long section path before the same leaf is no unlikeness)."""
    leaf_given, leaf = given.rsplit(".", 1)[-1], key.rsplit(".", 1)[-1]
    if leaf == leaf_given or _abbreviates(leaf, leaf_given) or _abbreviates(leaf_given, leaf):
        return 1.0
    return difflib.SequenceMatcher(None, given, key).ratio()


def _close(given: str, candidates: list[str]) -> list[str]:
    """Keys whose last part abbreviates the given one's or the reverse (HF's and
    torchtitan's `learning_rate` is `optim.lr`), then keys close to the whole dotted name
    whose last part is not far (a long section name shared is no likeness), then keys whose
    last part is close (so `lrr` finds `optim.lr` and `optim.warmup` finds
    `optim.warmup_steps`)."""
    leaf_given = given.rsplit(".", 1)[-1]
    close = [
        candidate
        for candidate in candidates
        if _abbreviates(candidate.rsplit(".", 1)[-1], leaf_given)
        or _abbreviates(leaf_given, candidate.rsplit(".", 1)[-1])
    ]
    for candidate in difflib.get_close_matches(given, candidates, n=3, cutoff=0.6):
        leaf = candidate.rsplit(".", 1)[-1]
        if candidate not in close and _likeness(leaf_given, leaf) >= LEAF_LIKENESS:
            close.append(candidate)
    by_leaf = {candidate.rsplit(".", 1)[-1]: candidate for candidate in candidates}
    for leaf in difflib.get_close_matches(leaf_given, list(by_leaf), n=3, cutoff=0.6):
        if by_leaf[leaf] not in close:
            close.append(by_leaf[leaf])
    return close[:3]


LEAF_LIKENESS = 0.5  # `actor_rollout_ref.rollout.nothing` is not `...rollout.n` (0.25)


def _abbreviates(short: str, name: str) -> bool:
    """Whether `short` is the initials of `name`'s words (`lr` of `learning_rate`)."""
    words = name.split("_")
    return len(words) > 1 and short == "".join(word[:1] for word in words)


def all_keys(cls: type, prefix: str = "") -> list[str]:
    """Every dotted key of the config `cls`, a section's name before its keys: what a
    mistyped key may have meant (a section name too: `optimizer.lr` mends to optim)."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        keys.append(f"{prefix}{f.name}")
        if dataclasses.is_dataclass(hints[f.name]):
            keys += all_keys(cast(type, hints[f.name]), f"{prefix}{f.name}.")
    return keys


def closest_choice(given: str, choices: Sequence[str]) -> str | None:
    """The one of `choices` that `given` was most likely meant for, case aside (`Qwen2-0.5B`
    is qwen2-0.5b, `disabled` is disable), with difflib's cutoff as click's own suggestions
    for commands and options; None where none is close."""
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(given.lower(), list(by_lower), n=1)
    return by_lower[close[0]] if close else None


def choice_refusal(
    key: str, given: str, what: str, choices: Sequence[str], otherwise: str = ""
) -> str:
    """The one line for `key` given `given`, which is none of `choices` (all of them named,
    never cut) and is `what` (`unknown shape`), with what else may be done (`otherwise`:
    ` or set model.path`) and the closest choice where one is."""
    meant = closest_choice(given, choices)
    hint = f"; did you mean {meant}?" if meant is not None else ""
    return f"{key}: {what} {given!r}; choose {' | '.join(choices)}{otherwise}{hint}"
