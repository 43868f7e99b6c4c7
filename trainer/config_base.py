"""What the config's schema (`trainer.config`) and its typing of values
(`trainer.config_coercion`) share: the error a configuration mistake raises, the markers a
field's annotation carries (`Range`, `Checked`, `ExpandUser`), and the words for a text key's
values. Kept apart so that both modules import it at their top, and neither the other.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from mfsdp_ckpt.errors import MfsdpUsageError

COMMAND_LINE = "command-line override"  # the source an override's error names


class ConfigError(MfsdpUsageError, ValueError):
    """A configuration mistake; the message names the key (and file) and what is wrong."""


@dataclass(frozen=True)
class Range:
    """A check on a field's value, declared in its annotation (`Annotated[int, Range(...)]`)
    and applied by the loader after the type check; `text` completes "must be ..."."""

    text: str
    accepts: Callable[[Any], bool]


@dataclass(frozen=True)
class Checked:
    """A check on a field's value, declared in its annotation, that says itself why it
    refuses one: `refusal(value, key)` is the reason (naming `key`), None where it accepts.
    For checks of several rules, where one Range text named them all and hid which failed."""

    refusal: Callable[[Any, str], str | None]


@dataclass(frozen=True)
class ExpandUser:
    """Marks a path field: a leading `~` or `~user` is the home directory, as in a shell.
    A shell expands it on the command line but not inside a YAML file (nor after `key=` in
    an override, which is no assignment to bash): `run_dir: ~/runs/x` created a directory
    named `~` in the current one, and `train_files: ~/data/x.parquet` was "no such file"
    while the file was there."""


LocalPath = Annotated[str, ExpandUser()]

# What a text key takes where its type cannot say (`checkpoint.resume=6` was refused as not
# a string, not saying what it takes)
TEXT_VALUES = {"checkpoint.resume": "auto | disable | PATH"}

# The text keys verl uses as text only, in f-strings and interpolations (the trackers' names,
# `checkpoints/${trainer.project_name}/${trainer.experiment_name}`): a number or boolean a
# verl config gives one names verl's run by the text Python prints for it (`1e3`, which
# OmegaConf reads as 1000.0, names it `1000.0`).
RUN_NAMES = frozenset({"trainer.project_name", "trainer.experiment_name"})


def unannotated(kind: Any) -> Any:
    """`kind` without its `Annotated` checks (`LocalPath` is a str)."""
    return typing.get_args(kind)[0] if typing.get_origin(kind) is Annotated else kind
