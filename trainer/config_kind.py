"""Whether a `--config` file is the kind the command reads, asked before it is loaded: a
GRPO config given to `mfsdp train sft` (or an SFT one to `train grpo`), or a verl launch
script given as a YAML config.

Loaded as they are, these fail on their first key the trainer lacks ("unknown config key
'actor'"; "did you mean data.val_files?" for SFT's data.val_ratio) or on their shape ("top
level must be a mapping of sections, found str" for a shell script): true of the file, but
no word that the file is fine and the command is the wrong one. What decides is what only
one kind has: a key of the other trainer's config that this trainer lacks, with no key
of this trainer's own, or the marks of a shell script. A file that loads is never refused
here: a key this trainer lacks fails to load in any case.
"""

from __future__ import annotations

import os
import re
from typing import Any

from mfsdp_ckpt.storage import safe_files
from trainer.config import ConfigError, SFTConfig, config_to_dict
from trainer.config_yaml import MAX_CONFIG_BYTES, YAMLConfigError, parse_yaml

SHELL_SUFFIXES = (".sh", ".bash")
# verl's trainers, run as modules (`python3 -m verl.trainer.main_ppo ...`)
_VERL_MODULE = re.compile(r"\bverl\.trainer\.\w+")
_SHOWN = 3


def refuse_other_kind(cls: type, path: str | os.PathLike | None) -> None:
    """ConfigError (one line, exit 2) when the config file at `path` is not one for
    `cls` (SFTConfig or GRPOConfig) but the other trainer's config or a shell script;
    nothing when it is not plainly either (loading it then says what is wrong)."""
    if path is None:
        return
    try:
        text = safe_files.read_text(path, MAX_CONFIG_BYTES)
    except OSError:  # loading it names what is wrong with the file
        return
    tree = _parsed(text, str(path))
    told = _shell_script(str(path), text, tree) or _other_trainer(cls, str(path), tree)
    if told is not None:
        raise ConfigError(told)


def _shell_script(path: str, text: str, tree: Any) -> str | None:
    """The refusal for a shell script (a `#!` line, a .sh name, or, for text that is no
    YAML mapping, a verl trainer module it runs): `mfsdp config from-verl` converts a verl
    launch script."""
    mapping = isinstance(tree, dict)
    verl = _VERL_MODULE.search(text)
    shell = text.startswith("#!") or path.lower().endswith(SHELL_SUFFIXES)
    if not shell and (mapping or verl is None):
        return None
    if verl is None:
        return (
            f"{path}: a shell script, not a YAML config (`mfsdp config defaults sft|grpo`"
            " prints one to start from)"
        )
    return (
        f"{path}: a verl launch script (it runs {verl.group(0)}), not a YAML config; convert it"
        f" with `mfsdp config from-verl {path} > config.yaml`, then give --config config.yaml"
    )


def _other_trainer(cls: type, path: str, tree: Any) -> str | None:
    """The refusal for the other trainer's config: it has keys only that trainer has
    (GRPO's actor/rollout sections, SFT's data.val_ratio) and none only `cls` has."""
    from trainer.grpo.config import GRPOConfig

    if not isinstance(tree, dict):
        return None
    other = GRPOConfig if cls is SFTConfig else SFTConfig
    ours, theirs = _keys(config_to_dict(cls())), _keys(config_to_dict(other()))
    given = _keys(tree)
    only_theirs = sorted(key for key in given if key in theirs and key not in ours)
    if not only_theirs or any(key in ours and key not in theirs for key in given):
        return None
    name, command = ("a GRPO", "grpo") if other is GRPOConfig else ("an SFT", "sft")
    sections = [key for key in only_theirs if "." not in key]
    has = (
        f"the {'/'.join(sections[:_SHOWN])} section{'s' if len(sections) > 1 else ''}"
        if sections
        else ", ".join(only_theirs[:_SHOWN])
    )
    return f"{path}: looks like {name} config (it has {has}): use mfsdp train {command}"


def _parsed(text: str, path: str) -> Any:
    """The YAML document in `text`, None when it is none (loading the file says why)."""
    try:
        return parse_yaml(text, path)
    except YAMLConfigError:
        return None


def _keys(tree: dict[str, Any], prefix: str = "") -> set[str]:
    """Every dotted key of a nested mapping, sections included (`data`, `data.val_ratio`)."""
    keys = set()
    for name, value in tree.items():
        key = f"{prefix}{name}"
        keys.add(key)
        if isinstance(value, dict):
            keys |= _keys(value, f"{key}.")
    return keys


__all__ = ["refuse_other_kind"]
