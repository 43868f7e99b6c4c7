"""What Hydra makes of a verl command line's overrides as a whole, before any is read as an
mfsdp key: they apply in order, so a later `~key` (delete) or `key=null` undoes what the
earlier ones set under that key; and verl's config is a struct, so a key its files do not
have is refused unless added with `+`. A module of its own: these are Hydra's rules for
the overrides together, apart from what each key means (`trainer.verl_rules`).
"""

from __future__ import annotations

from typing import Any

from trainer import verl_keys
from trainer.verl_hydra_files import selects_megatron
from trainer.verl_megatron_optim import MEGATRON_ENGINE_ONLY, OPTIMIZER_OVERRIDES
from trainer.verl_rules import normalise


def in_order(
    command: str, pairs: list[tuple[str, Any]]
) -> tuple[list[tuple[str, Any]], list[str], list[str]]:
    """`pairs` (the command's overrides, in order) as Hydra leaves them, with "key: why" for
    each deleted key carried here and notes for the others. `~key` (or `~key=value`)
    deletes the key and everything under it set before it: verl then builds its config
    class with that field's default, which is not known here, so a key mfsdp carries is
    not carried over (it was dropped without a word, or kept at the value deleted), unless
    a later override sets that key again (`~k` then `+k=v`: verl trains with v). A later
    `key=null` replaces what was set at or under the key before it, as Hydra's last value
    wins (a later `key={...}` is merged into it by Hydra, as the rules read it)."""
    kept: list[tuple[str, Any]] = []
    deleted: dict[str, str] = {}  # name -> why, until a later override sets it again
    notes: list[str] = []
    for key, value in pairs:
        name = key.lstrip("+~")
        if key.startswith("~") or value is None:
            kept = [pair for pair in kept if not _under(pair[0], name)]
        if not key.startswith("~"):
            kept.append((key, value))
            deleted.pop(name, None)
        elif verl_keys.ignored_at_any_value(command, name):
            notes.append(f"{key}: Hydra deletes it from verl's config; ignored here at any value")
        else:
            deleted[name] = (
                f"{key}: Hydra deletes {name} from verl's config, so verl trains with its config"
                " class's default for it (or fails where no class has one), which is not known"
                " here: write the value that run uses in this config, or drop the deletion"
            )
    dropped = list(deleted.values())
    return kept, dropped, notes


def _under(key: str, name: str) -> bool:
    """Whether the override `key` sets `name` or a key under it."""
    plain = key.lstrip("+")
    return plain == name or plain.startswith(name + ".")


def struct_refusals(
    pairs: list[tuple[str, Any]], selected: list[tuple[str, Any]], config: str | None
) -> tuple[list[tuple[str, Any]], list[str]]:
    """`pairs` less the keys verl's struct config refuses without Hydra's `+` (verl then
    does not start: "Key '...' is not in struct"), and "key=value: why" for each: a key
    under `optim.override_optimizer_config` (null or `{}` in verl's optimizer files), and a
    key only Megatron's engine has (`engine.use_megatron_fsdp`) on an SFT run whose engine
    file is not Megatron's (no `engine=megatron` selection among `selected`, no Megatron
    trainer `config`). Read as given, such a key was taken as proof of the Megatron
    backend, and Megatron's betas replaced the run's."""
    megatron_engine = any(selects_megatron(key, option) for key, option in selected) or (
        config is not None and "megatron" in config
    )
    kept: list[tuple[str, Any]] = []
    refused: list[str] = []
    for key, value in pairs:
        read_as = normalise(key)
        parts = read_as.split(".")
        optimizer_field = read_as.startswith(OPTIMIZER_OVERRIDES + ".")
        engine_only = parts[0] == "engine" and len(parts) > 1 and parts[1] in MEGATRON_ENGINE_ONLY
        if key.startswith("+") or not (optimizer_field or (engine_only and not megatron_engine)):
            kept.append((key, value))
            continue
        where = (
            f"{OPTIMIZER_OVERRIDES} holds no keys in verl's optimizer files"
            if optimizer_field
            else "verl's engine file here is not Megatron's (select it with engine=megatron)"
        )
        refused.append(
            f"{key}={value}: verl refuses it and does not start (Hydra: Key"
            f" '{parts[-1]}' is not in struct): {where}; add a key with +{key}=..."
        )
    return kept, refused
