"""Whether a `--config` file is the kind the command reads, asked before it is loaded: a
GRPO config given to `mfsdp train sft` (or an SFT one to `train grpo`), a verl launch
script given as a YAML config, or no run config at all (a Hugging Face config.json, a
checkpoint's manifest, a data file: `not_a_run_config`).

Loaded as they are, these fail on their first key the trainer lacks ("unknown config key
'actor'"; "did you mean data.val_files?" for SFT's data.val_ratio) or on their shape ("top
level must be a mapping of sections, found str" for a shell script): true of the file, but
no word that the file is fine and the command is the wrong one. What decides is what only
one kind takes (`kind_keys`): a key the other trainer's config takes and this one does not,
with no key only this one takes, or the marks of a shell script. "Takes" counts verl's names
as the loader does (`verl_keys.carries`): verl's SFT keys (`data.train_batch_size`,
`model.partial_pretrain`) are SFT's, as they load there. A file that loads is never refused
here: a key this trainer does not take fails to load in any case.

`mfsdp config from-verl` names the trainer of a verl YAML with `likely_kind`, from the same
keys, so the command it prints is one this check lets through.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.storage import safe_files
from trainer.config import ConfigError, SFTConfig
from trainer.config_yaml import MAX_CONFIG_BYTES, YAMLConfigError, parse_yaml
from trainer.not_a_run_config import other_file_by_keys, other_file_by_name
from trainer.verl_keys import carries, command_of
from trainer.verl_rules import VERL_ONLY_SECTION

SHELL_SUFFIXES = (".sh", ".bash")
# verl's trainers, run as modules (`python3 -m verl.trainer.main_ppo ...`)
_VERL_MODULE = re.compile(r"\bverl\.trainer\.\w+")
_SHOWN = 3


def refuse_other_kind(cls: type, path: str | os.PathLike | None) -> None:
    """ConfigError (one line, exit 2) when the config file at `path` is not one for
    `cls` (SFTConfig or GRPOConfig) but the other trainer's config, a shell script or a
    file of another kind (`not_a_run_config`); nothing when it is plainly none of these
    (loading it then says what is wrong)."""
    if path is None:
        return
    named = other_file_by_name(str(path), command_of(cls)) if os.path.isfile(path) else None
    if named is not None:  # data or weights may be far larger than a config: left unread
        raise ConfigError(named)
    try:
        text = safe_files.read_text(path, MAX_CONFIG_BYTES)
    except OSError:  # loading it names what is wrong with the file
        return
    tree = _parsed(text, str(path))
    told = (
        _shell_script(str(path), text, tree)
        or other_file_by_keys(str(path), tree, command_of(cls))
        or _other_trainer(cls, str(path), tree)
    )
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
        defaults = mfsdp_command("config defaults sft|grpo")
        return f"{path}: a shell script, not a YAML config ({defaults} prints one to start from)"
    convert = mfsdp_command("config from-verl", Path(path), "> config.yaml")
    return (
        f"{path}: a verl launch script (it runs {verl.group(0)}), not a YAML config; convert it"
        f" with {convert}, then give --config config.yaml"
    )


def _other_trainer(cls: type, path: str, tree: Any) -> str | None:
    """The refusal for the other trainer's config: it has keys only that trainer takes
    (GRPO's actor/rollout sections, SFT's data.val_ratio) and none only `cls` takes."""
    if not isinstance(tree, dict):
        return None
    other = "grpo" if command_of(cls) == "sft" else "sft"
    if kind_of(tree) != other:
        return None
    only_theirs = kind_keys(tree)[other]
    name = "a GRPO" if other == "grpo" else "an SFT"
    sections = [key for key in only_theirs if "." not in key]
    has = (
        f"the {'/'.join(sections[:_SHOWN])} section{'s' if len(sections) > 1 else ''}"
        if sections
        else ", ".join(only_theirs[:_SHOWN])
    )
    return f"{path}: looks like {name} config (it has {has}): use mfsdp train {other}"


def kind_keys(tree: dict[str, Any]) -> dict[str, list[str]]:
    """For `sft` and `grpo`: the dotted keys of `tree` (sections too) that only that
    trainer's config takes, sorted; keys both take, or neither, say nothing."""
    from trainer.grpo.config import GRPOConfig

    keys = sorted(_keys(tree))
    sft = {key for key in keys if carries(SFTConfig, key)}
    grpo = {key for key in keys if carries(GRPOConfig, key)}
    return {
        "sft": [key for key in keys if key in sft - grpo],
        "grpo": [key for key in keys if key in grpo - sft],
    }


def kind_of(tree: dict[str, Any]) -> str | None:
    """`sft` or `grpo` when `tree` has keys only that trainer takes and none only the
    other takes; None when it has both or neither (it may load under either)."""
    found = kind_keys(tree)
    if found["sft"] and not found["grpo"]:
        return "sft"
    if found["grpo"] and not found["sft"]:
        return "grpo"
    return None


def likely_kind(tree: dict[str, Any]) -> str:
    """The trainer a config is for, where one must be named (`mfsdp config from-verl`):
    `kind_of`, else `grpo` for a file with verl's PPO section (`actor_rollout_ref`, which
    verl's SFT trainer has not), else `sft`."""
    return kind_of(tree) or ("grpo" if VERL_ONLY_SECTION.rstrip(".") in tree else "sft")


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


__all__ = ["kind_keys", "kind_of", "likely_kind", "refuse_other_kind"]
