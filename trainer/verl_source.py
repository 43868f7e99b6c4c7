"""What reading a verl source takes, whether a YAML config or a bash launch script: its
error, its bounds, the bounded YAML reader, the config class a command converts into, and
which keys name paths. A module of its own so that the script reader (trainer/verl_script*.py)
and the conversion (trainer/verl_import.py) both import it, neither the other.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

import yaml

from mfsdp_ckpt.errors import MfsdpUsageError
from trainer import shell_arithmetic, shell_command_targets, shell_unexpanded, verl_keys
from trainer.config_yaml import ExpansionBudget, YAMLConfigError, parse_yaml
from trainer.verl_hydra_value import HydraValueError, hydra_override_value

MAX_SOURCE_BYTES = 1 << 20  # launch scripts and configs are a few KiB
# What `$NAME` substitutions may copy, all told: each copies the value, so assignments that
# double one (`B=$A$A`, `C=$B$B`, ...) grow it 2**lines ("billion laughs" in 40 lines).
MAX_EXPANDED_CHARS = 4 * MAX_SOURCE_BYTES


class VerlSourceError(MfsdpUsageError, ValueError):
    """The file is not a verl launch script or YAML config this can read; names the file."""


def config_class(command: str) -> type:
    """The config class a verl source for `command` (sft, grpo) converts into: its fields
    decide which of the source's keys are mfsdp's and which are verl's alone. Imported
    here, not at the top: trainer.config reads verl YAML through this module."""
    from trainer.config import SFTConfig
    from trainer.grpo.config import GRPOConfig

    return GRPOConfig if command == "grpo" else SFTConfig


def parse_bounded(text: str, source: str, budget: ExpansionBudget) -> Any:
    """The value of one `key=value` override of a launch script as verl gets it: read by
    Hydra's override grammar (`verl_hydra_value`), so `{a:1}` is a mapping, `1e3` a float
    and `0x1f` its text; what Hydra refuses (`k=~`, `k=a#b`, the sweep `k=a,b`) is one line
    naming `source`, as verl does not start on it, as is one refused whatever bash makes
    of the shell syntax it holds (`hydra_refusal`: `${x}}`, `$A,$B`). A value refused
    only for its shell syntax (`run_$(date +%F)`, known only when the script runs) is read
    through the config files' bounded reader instead (no tags, no alias bombs, no more
    text than `budget` leaves), a scalar as its text: no Hydra number or flag holds a `$`.
    An empty value (`k=`, the usual `k=$UNSET`) is the empty text, as Hydra reads it."""
    if not text.strip():
        return ""
    try:
        return hydra_override_value(text)
    except HydraValueError as err:
        if ("$" not in text and "`" not in text) or hydra_refusal(text):
            raise VerlSourceError(f"{source}: {err}") from None
    trial = dataclasses.replace(budget)  # a list or mapping is read again, as YAML reads it
    read = _parse(text, source, trial, numbers_as_text=True)
    if isinstance(read, (list, dict)):
        return _parse(text, source, budget)
    budget.nodes, budget.chars = trial.nodes, trial.chars
    return read if isinstance(read, str) else text


# what bash may still expand in a value as read here besides arithmetic (`$((N * 2))`,
# `$[N * 2]`, read at any depth by `shell_arithmetic.as_word`): a variable's reference
# (`$X`, `${X:-a}`) or a command's output (`$(cmd)`, `` `cmd` ``)
_SHELL_EXPANSION = re.compile(
    shell_command_targets.REFERENCE.pattern + "|" + shell_unexpanded.COMMAND_SUBSTITUTION.pattern
)


def hydra_refusal(text: str, backquotes: bool = True) -> str | None:
    """Why Hydra refuses `text` (a value as verl gets it, less what bash may still expand
    in it: its backquoted commands too, unless `backquotes` is False, where bash passes
    them as text), or None: refused with each expansion as a plain word, it is refused
    whatever bash makes of them (`${` and `${x}}` quoted for bash, `x'${y}'`, a nested
    `${a,${b}}`, a backquote outside Hydra's quotes)."""
    expansion = _SHELL_EXPANSION if backquotes else shell_command_targets.REFERENCE
    plain = expansion.sub("x", shell_arithmetic.as_word(text, "x") if backquotes else text)
    if "$(" in plain:  # a command nested deeper: what bash makes of it is not read here
        return None
    try:
        hydra_override_value(plain)
    except HydraValueError as err:
        return str(err)
    return None


def parse_verl_yaml(text: str, source: str, budget: ExpansionBudget) -> Any:
    """A verl YAML config as OmegaConf's loader reads it for verl (`1e3` a float), through
    the bounded reader; a mistake is one line naming `source`."""
    return _parse(text, source, budget, exponent_floats=True)


def _parse(text: str, source: str, budget: ExpansionBudget, **reading: bool) -> Any:
    try:
        return parse_yaml(text, source, budget, **reading)
    except YAMLConfigError as err:
        raise VerlSourceError(str(err)) from None


def verl_defaults_words(command: str, written: bool = True) -> str:
    """What a config file of verl's own that Hydra merges in means for the conversion:
    `written`, the conversion writes verl's defaults where mfsdp's differ (the run is whole
    in its source), as for a run that names no file; else (a file of the user's is merged
    in too, which may set any key) mfsdp's stand. It said mfsdp's stood over a config that
    held verl's (`data.train_batch_size: 1024`)."""
    listed = f"`mfsdp config defaults {command}` lists mfsdp's"
    if written:
        return (
            "verl's own config, whose settings are verl's defaults: where mfsdp's default"
            " differs in what trains, verl's is written into this config, each with a note; names,"
            f" trackers, paths and devices keep mfsdp's ({listed})"
        )
    return (
        "verl's own config, whose settings are verl's defaults; with a file of yours merged"
        f" in too, which may set any key, none is written: mfsdp's defaults stand ({listed})"
    )


@functools.cache
def path_keys(cls: type) -> frozenset[str]:
    """The keys of `cls` that name a file or directory (`LocalPath` fields: model.path,
    data.train_files, trainer.run_dir, checkpoint.resume, ...)."""
    from trainer.config import path_values

    return frozenset(key for key, _value in path_values(cls()))


def names_a_path(cls: type, given: str) -> bool:
    """Whether the verl or mfsdp key `given` sets a path key of `cls` (verl's
    `actor_rollout_ref.model.path`, `model.partial_pretrain`, `trainer.default_local_dir`,
    `trainer.resume_from_path` too): the values an environment variable may fill in."""
    key = given.lstrip("+")
    rule = verl_keys.rule_for(key)
    if key == "trainer.resume_from_path":  # read with resume_mode as checkpoint.resume
        key = "checkpoint.resume"
    elif rule is not None:
        key = rule.target or ""
    return key in path_keys(cls)


def yaml_shown(value: Any) -> str:
    """A value as the config below writes it (`false`, not Python's `False`)."""
    return yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()
