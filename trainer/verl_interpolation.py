"""OmegaConf's `${a.b}` references between the keys of one verl YAML config, filled in from
the file as verl's loader would, for `mfsdp config from-verl`.

verl's own configs and its users' write `default_local_dir:
checkpoints/${trainer.project_name}/${trainer.experiment_name}` and `load_contents:
${trainer.checkpoint.save_contents}`: carried over as written, the run dir was a path to edit
(said to hold "a shell variable", which it does not) and the other key was refused. Only a
reference to a key of the same file is filled in, absolute or relative (`${.save_contents}`,
a key beside it), and OmegaConf's `${oc.select:key,default}`, which verl's own configs write
for every key that copies another (`log_prob_use_dynamic_bsz:
${oc.select:actor_rollout_ref.actor.use_dynamic_bsz,false}`): the key's value, or the
default where the file lacks the key (or leaves it `???`). Other resolvers (`${oc.env:HOME}`),
defaults that are more than a plain value, and references to keys the file lacks stay as
written, for the conversion to name. Every reference read counts against a budget of
characters, as references to references may double a value each time.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from mfsdp_ckpt.errors import MfsdpUsageError

_KEY = r"(\.*)([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
# `${trainer.project_name}`, `${.save_contents}` (beside it), `${..x}` (one section up), and
# `${oc.select:data.max_prompt_length,512}` (the default after the comma: no braces in it
# but an empty mapping's, `${oc.select:actor_rollout_ref.actor.megatron.x,{}}`)
REFERENCE = re.compile(rf"\$\{{(?:{_KEY}|oc\.select:\s*{_KEY}\s*(?:,((?:[^{{}}]|\{{\}})*))?)\}}")
# a default OmegaConf reads as a plain string: `token-mean`, `~/models/x`
_UNQUOTED = re.compile(r"[A-Za-z0-9_./~+\-]+")
MAX_DEPTH = 8  # a reference to a reference ..., deeper than a config writes them
_MISSING = object()


class InterpolationTooLarge(MfsdpUsageError, ValueError):
    """The file's references fill in more than the budget allows; not a config."""


def resolve(tree: dict[str, Any], max_chars: int) -> list[str]:
    """Fill in, in place, every reference in `tree`'s string values (lists' items too) that
    names a key of `tree`; the dotted keys whose value changed."""
    return _Resolver(tree, max_chars).walk(tree, [])


class _Resolver:
    def __init__(self, tree: dict[str, Any], max_chars: int):
        self.tree = tree
        self.left = max_chars

    def walk(self, section: dict[str, Any], where: list[str]) -> list[str]:
        """Fill in the values of `section` (at path `where`) and of the sections in it."""
        changed = []
        for key, value in list(section.items()):
            if isinstance(value, dict):
                changed += self.walk(value, [*where, str(key)])
                continue
            filled = self.value(value, where)
            # `is not` first: a NaN (`.nan`) is unequal to itself, and was said filled in
            if filled is not value and filled != value:
                section[key] = filled
                changed.append(".".join([*where, str(key)]))
        return changed

    def value(self, value: Any, where: list[str]) -> Any:
        """One value of the section at `where`, a list's items each."""
        if isinstance(value, list):
            return [self.value(item, where) for item in value]
        if isinstance(value, str) and "${" in value:
            return self.fill(value, where, 0)
        return value

    def fill(self, text: str, where: list[str], depth: int) -> Any:
        """`text` (a value in the section at `where`) with its references filled in; a value
        that is one reference alone takes the referenced value's type (a list stays one)."""
        whole = REFERENCE.fullmatch(text)
        if whole:
            found = self.lookup(whole, where, depth)
            return text if found is _MISSING else found

        def substitute(match: re.Match) -> str:
            found = self.lookup(match, where, depth)
            if found is _MISSING or isinstance(found, (dict, list)):
                return match.group(0)
            shown = str(found)  # as OmegaConf writes a scalar into a string
            self.spend(len(shown))
            return shown

        return REFERENCE.sub(substitute, text)

    def lookup(self, match: re.Match, where: list[str], depth: int) -> Any:
        """The value `match` references, filled in itself; for `oc.select`, its default where
        the file lacks the key (None without one); _MISSING where there is none."""
        self.spend(len(match.group(0)))
        if match.group(2) is not None:
            return self.find(match.group(1), match.group(2), where, depth)
        found = self.find(match.group(3), match.group(4), where, depth)
        if found is not _MISSING and found != "???":
            return found
        if depth >= MAX_DEPTH:
            return _MISSING
        return None if match.group(5) is None else _plain_value(match.group(5))

    def find(self, dots: str, dotted: str, where: list[str], depth: int) -> Any:
        """The value at key `dotted` (relative to the section at `where` with `dots`),
        filled in itself; _MISSING where there is none."""
        up = len(dots) - 1 if dots else len(where)  # absolute: from the top
        if depth >= MAX_DEPTH or up > len(where):
            return _MISSING
        path = where[: len(where) - up] + dotted.split(".")
        node: Any = self.tree
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return _MISSING
            node = node[part]
        if isinstance(node, str) and "${" in node:
            node = self.fill(node, path[:-1], depth + 1)
        if isinstance(node, (dict, list)):
            self.spend(len(str(node)))
            return copy.deepcopy(node)
        return node

    def spend(self, chars: int) -> None:
        self.left -= chars
        if self.left < 0:
            raise InterpolationTooLarge(
                "its ${...} references fill in more text than a config holds; not a config"
            )


def _plain_value(text: str) -> Any:
    """An `oc.select` default as OmegaConf reads a plain one (null, a flag, a number, a
    quoted or unquoted string, `[]`, `{}`); _MISSING for anything more."""
    text = text.strip()
    if text.lower() in ("null", "true", "false"):
        return None if text.lower() == "null" else text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" and text[0] not in text[1:-1]:
        return text[1:-1]
    if text in ("[]", "{}"):
        return [] if text == "[]" else {}
    return text if _UNQUOTED.fullmatch(text) else _MISSING
