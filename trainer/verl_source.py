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
from trainer import verl_keys
from trainer.config_yaml import ExpansionBudget, YAMLConfigError, parse_yaml

MAX_SOURCE_BYTES = 1 << 20  # launch scripts and configs are a few KiB
# What `$NAME` substitutions may copy, all told: each copies the value, so assignments that
# double one (`B=$A$A`, `C=$B$B`, ...) grow it 2**lines ("billion laughs" in 40 lines).
MAX_EXPANDED_CHARS = 4 * MAX_SOURCE_BYTES
# The one-token values Hydra's override grammar types (hydra/grammar/OverrideLexer.g4): INT
# is decimal only, `_` between digits; FLOAT has a point or an exponent, or is inf or nan;
# BOOL and NULL in any case. Any other unquoted value is the text written (`0x1f`, `yes`,
# `007`), where YAML 1.1 reads 31, true and 7.
_INT_UNSIGNED = r"(?:0|[1-9](?:_?[0-9])*)"
_POINT_FLOAT = rf"(?:{_INT_UNSIGNED}?\.[0-9](?:_?[0-9])*|{_INT_UNSIGNED}\.)"
_EXPONENT_FLOAT = rf"(?:{_POINT_FLOAT}|{_INT_UNSIGNED})[eE][+-]?{_INT_UNSIGNED}"
_HYDRA_INT = re.compile(rf"[+-]?{_INT_UNSIGNED}")
_HYDRA_FLOAT = re.compile(rf"[+-]?(?:{_EXPONENT_FLOAT}|{_POINT_FLOAT}|(?i:inf|nan))")
_HYDRA_BOOL = re.compile(r"(?i:true|false)")
_HYDRA_NULL = re.compile(r"(?i:null)")
# Hydra's override lexer takes `~` in no unquoted value (it is not among its UNQUOTED_CHAR):
# `k=~` and `k=~/ckpt` stop verl with "token recognition error" before it starts, where
# YAML reads `~` as null. Inside quotes (`k='~'`) it is text. A value still holding shell
# syntax (`${X/#~/}`) is the shell's to expand first.
_HYDRA_QUOTED = re.compile(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"")


class VerlSourceError(MfsdpUsageError, ValueError):
    """The file is not a verl launch script or YAML config this can read; names the file."""


def config_class(command: str) -> type:
    from trainer.config import SFTConfig
    from trainer.grpo.config import GRPOConfig

    return GRPOConfig if command == "grpo" else SFTConfig


def parse_bounded(text: str, source: str, budget: ExpansionBudget) -> Any:
    """The value of one `key=value` override of a launch script as verl gets it, through the
    config files' bounded reader (no tags, no alias bombs, no more text as walked than
    `budget` leaves); a mistake is one line naming `source` and where in the text it is.
    A scalar is typed as Hydra types it (`hydra_value`), so its YAML 1.1 forms (`007`,
    `12:30`) are not refused: Hydra reads them as the text written. An empty value (`k=`,
    the usual `k=$UNSET`) is the empty text, as Hydra reads it; a character Hydra's
    lexer refuses unquoted (`k=~`) is refused here as verl would."""
    if not text.strip():
        return ""
    _refuse_hydra_lexer_error(text, source)
    trial = dataclasses.replace(budget)  # a list or mapping is read again, as YAML reads it
    read = _parse(text, source, trial, numbers_as_text=True)
    if isinstance(read, (list, dict)):
        return _parse(text, source, budget)
    budget.nodes, budget.chars = trial.nodes, trial.chars
    return hydra_value(text, read)


def _refuse_hydra_lexer_error(text: str, source: str) -> None:
    """A value with a `~` outside quotes is one line naming it: verl never starts on it, so
    no value (YAML's null for `~`) is what verl runs with."""
    if "~" in _HYDRA_QUOTED.sub("", text) and "$" not in text:
        raise VerlSourceError(
            f"{source}={text:.80}: Hydra refuses '~' outside quotes (token recognition"
            " error), so verl does not start; quote the value ('...') for its text"
        )


def parse_verl_yaml(text: str, source: str, budget: ExpansionBudget) -> Any:
    """A verl YAML config as OmegaConf's loader reads it for verl (`1e3` a float), through
    the bounded reader; a mistake is one line naming `source`."""
    return _parse(text, source, budget, exponent_floats=True)


def _parse(text: str, source: str, budget: ExpansionBudget, **reading: bool) -> Any:
    try:
        return parse_yaml(text, source, budget, **reading)
    except YAMLConfigError as err:
        raise VerlSourceError(str(err)) from None


def hydra_value(written: str, read: Any) -> Any:
    """The value verl gets from the override value `written`, a scalar YAML read as `read`
    (its numbers as text): Hydra, not YAML, types a scalar on verl's command line. `1e3` is
    the float 1000.0 (YAML 1.1: the text), `0x1f`, `yes` and `off` are their text (YAML
    1.1: 31, true, false): read as YAML 1.1 reads it, a run dir `0x1f` was converted as
    `31`. A quoted value is the text inside the quotes either way. A Hydra integer is a
    YAML one too, so the reader has bounded its digits."""
    if _HYDRA_INT.fullmatch(written):
        return int(written)
    if _HYDRA_FLOAT.fullmatch(written):
        return float(written)
    if _HYDRA_BOOL.fullmatch(written):
        return written.lower() == "true"
    if _HYDRA_NULL.fullmatch(written):
        return None
    return read if isinstance(read, str) else written


def verl_defaults_words(command: str) -> str:
    """What a config file of verl's own that Hydra merges in means for the conversion."""
    return (
        "verl's own config, whose settings are verl's defaults: as for every key the run does"
        f" not set, mfsdp's defaults stand (`mfsdp config defaults {command}` lists them)"
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
