"""A verl null on a switch: false, as verl reads it, never "not set".

Elsewhere a null is verl's "not set" and mfsdp's default stands (trainer.verl_keys). On a
switch that is wrong: Hydra puts None in the config and verl tests the key for truth
(`if self.config.use_kl_loss`) or reads it with `.get(key, default)`, which OmegaConf
answers with the None given, not the default. So `use_kl_loss: null` trains without a KL
loss in verl, where mfsdp's default (true) turned it on, and writing the null gave the
opposite of leaving the key out (verl's default, false, written by `mfsdp config
from-verl`). The switches are the verl keys whose mfsdp key is a bool (found from the
config class, so a new one is never missed) and those a rule converts (CONVERTED_SWITCHES),
less those one of verl's trainers never tests (NOT_SWITCHES), whose null stays "not set".
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import typing
from typing import Any

log = logging.getLogger("mfsdp.config")

# verl switches a rule converts into a non-bool mfsdp key: verl key -> what false sets
# (verl's create_sft_dataset reads `multiturn.enable` with `.get(..., False)`: SFTDataset)
CONVERTED_SWITCHES: dict[str, dict[str, Any]] = {
    "data.multiturn.enable": {"data.chat_columns": "prompt_response"}
}

# keys of a bool mfsdp key that a verl trainer never tests for truth, per command: verl's SFT
# samplers shuffle whatever data.shuffle holds (`DistributedSampler(..., shuffle=True)` in
# fsdp_sft_trainer and sft_trainer), so a null there keeps mfsdp's default, true, as verl trains
NOT_SWITCHES: dict[str, frozenset[str]] = {"sft": frozenset({"data.shuffle"}), "grpo": frozenset()}


@functools.cache
def flag_default(cls: type, key: str) -> bool | None:
    """mfsdp's default of dotted `key` in config class `cls` where the key is a bool; None
    where it is no bool key of `cls`."""
    kind: Any = cls
    *sections, last = key.split(".")
    for part in sections:
        if not dataclasses.is_dataclass(kind):
            return None
        kind = typing.get_type_hints(kind).get(part)
    if not dataclasses.is_dataclass(kind) or typing.get_type_hints(kind).get(last) is not bool:
        return None
    found = {field.name: field for field in dataclasses.fields(kind)}[last]
    return found.default if isinstance(found.default, bool) else None


def null_switch(
    cls: type, verl_key: str, key: str | None, source: str = ""
) -> dict[str, Any] | None:
    """What a null on verl key `verl_key` (whose mfsdp key is `key`, None where a rule
    converts it) sets in a config of `cls`: the mfsdp keys false sets, with one note saying
    so, and where mfsdp's default is true that the two readings differ; None where the key
    is no switch (its null stays verl's "not set"). `source`: the file the note names."""
    from trainer.verl_keys import command_of  # verl_keys reads this module

    if verl_key in NOT_SWITCHES[command_of(cls)]:
        return None
    if verl_key in CONVERTED_SWITCHES:
        mapped = CONVERTED_SWITCHES[verl_key]
        default = None
    else:
        default = flag_default(cls, key) if key else None
        if default is None:
            return None
        mapped = {typing.cast(str, key): False}
    shown = ", ".join(f"{name}={str(value).lower()}" for name, value in mapped.items())
    differs = " (mfsdp's default, left out, is true)" if default else ""
    log.warning(
        "note: %sverl's %s is null, which verl reads as false: %s here%s",
        f"{source}: " if source else "",
        verl_key,
        shown,
        differs,
    )
    return mapped
