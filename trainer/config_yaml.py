"""YAML for run configs: the bounded loader every mfsdp YAML goes through
(`mfsdp_ckpt.storage.bounded_yaml`: no `!!python/...` tags, no anchors that expand past
what a config may hold, no nesting deeper than any config, no 5,000-digit integers, no key
given twice, no traceback from a value its tag cannot make), plus what a config file must
also be: a regular file of at most MAX_CONFIG_BYTES of UTF-8, its numbers in forms that
Hydra and YAML 1.2 read alike. Anything else is one YAMLConfigError line (exit 2) instead of
hanging, eating memory, or printing a traceback.

As walked, a config holds no more text than a config file may (MAX_EXPANDED_CHARS =
MAX_CONFIG_BYTES): one alias standing for a long string counts as often as it is used.
Documents read together (the values of one launch script) share one `ExpansionBudget`.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import Any

import yaml

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.format.closest_path import missing_hint
from mfsdp_ckpt.storage import bounded_yaml
from mfsdp_ckpt.storage.bounded_yaml import (
    MAX_INT_DIGITS,
    YAML_TAG,
    BoundedLoader,
    ExpansionBudget,
    YAMLRefused,
)
from mfsdp_ckpt.storage.safe_files import kind_name
from trainer.shown_value import shown_value

MAX_CONFIG_BYTES = 1 << 20
MAX_EXPANDED_CHARS = MAX_CONFIG_BYTES
_YAML_1_1_ONLY = (
    "(Hydra and YAML 1.2 read it otherwise); write the number plainly, or quote it for text"
)


class YAMLConfigError(MfsdpUsageError, ValueError):
    """The text is not a small plain YAML document; the message starts with its source."""


class _ConfigLoader(BoundedLoader):
    """The bounded loader, refusing YAML 1.1's octal and base-60 numbers too: PyYAML reads
    `010` as 8 and `1:30` as 90, Hydra (which verl's configs are written for) and YAML 1.2
    as 10 and text, so a config holding one means two values; and reading a date as its
    text, as Hydra does."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        value = super().construct_yaml_int(node)  # its digits are bounded first
        text = str(node.value).lstrip("+-").replace("_", "")
        if ":" in text or (len(text) > 1 and text[0] == "0" and text.isdigit()):
            raise YAMLRefused(
                f"{cut_to(repr(node.value), 80)} at line {node.start_mark.line + 1} is an integer"
                " only in"
                f" YAML 1.1's octal or base-60 forms, read as {shown_value(value)}"
                f" {_YAML_1_1_ONLY}"
            )
        return value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        """YAML 1.1's base-60 float (`1:30.5`, 90.5) is refused as its base-60 integers are,
        before it is computed."""
        if ":" in str(node.value):
            raise YAMLRefused(
                f"{cut_to(repr(node.value), 80)} at line {node.start_mark.line + 1} is a number"
                " only in"
                f" YAML 1.1's base-60 form {_YAML_1_1_ONLY}"
            )
        return super().construct_yaml_float(node)

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> str:
        """A date or time (`trainer.project_name: 2024-01-01`) is the text written, as Hydra
        (OmegaConf) reads it: PyYAML made a `datetime.date`, which no key takes, so a run
        named by its date was refused ("expects a string"). One PyYAML cannot make (a 13th
        month) is still refused as before."""
        super().construct_yaml_timestamp(node)
        return str(self.construct_scalar(node))


_ConfigLoader.add_constructor(YAML_TAG + "int", _ConfigLoader.construct_yaml_int)
_ConfigLoader.add_constructor(YAML_TAG + "float", _ConfigLoader.construct_yaml_float)
_ConfigLoader.add_constructor(YAML_TAG + "timestamp", _ConfigLoader.construct_yaml_timestamp)


class _NumbersAsTextLoader(_ConfigLoader):
    """For the value of a key that takes only text (a run dir, a name): a number is the text
    written, as typed on a command line. `trainer.run_dir=007` and `=12:30` were refused as
    YAML 1.1 numbers while `=6` and `=0x1f` were taken as typed."""

    def construct_number_text(self, node: yaml.ScalarNode) -> str:
        return str(self.construct_scalar(node))

    def construct_integer_text(self, node: yaml.ScalarNode) -> str:
        """An integer's text, its digits as written bounded as every integer's are (a verl
        override of 5,000 hex digits is one line, as in a config file), but no integer made
        of it: a word YAML 1.1's integer pattern matches and int() does not read (`0x_`,
        `-0b__`) is a name as typed, where making it refused the name as "not a valid
        !!int" and quoted int()'s own error."""
        text = str(node.value).lstrip("+-").replace("_", "")
        digits = text[2:] if text[:2] in ("0b", "0x") else text.replace(":", "")
        if len(digits) > MAX_INT_DIGITS:
            line = node.start_mark.line + 1
            raise YAMLRefused(f"integer at line {line} has {len(digits)} digits; refusing")
        return self.construct_number_text(node)


_NumbersAsTextLoader.add_constructor(YAML_TAG + "int", _NumbersAsTextLoader.construct_integer_text)
_NumbersAsTextLoader.add_constructor(YAML_TAG + "float", _NumbersAsTextLoader.construct_number_text)


class _HydraFloatLoader(_ConfigLoader):
    """mfsdp's reading, but a float written with an exponent and no point (`1e-5`, `5e5`)
    or no sign in it (`5.0e5`) is a float, as OmegaConf's YAML loader (omegaconf/_utils.py,
    get_yaml_loader) and YAML 1.2 read it, where PyYAML's YAML 1.1 reads it as text; quoted
    (`'1e-5'`) it stays text. For values no typed key reads (`model.overrides`, passed to
    transformers as they are): a typed key makes a number of the text anyway."""


# OmegaConf's float resolver, as get_yaml_loader adds it to PyYAML's
_HYDRA_FLOAT = re.compile(
    r"""^(?:
     [-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_HYDRA_FLOAT_FIRST = list("-+0123456789.")
_HydraFloatLoader.add_implicit_resolver(YAML_TAG + "float", _HYDRA_FLOAT, _HYDRA_FLOAT_FIRST)


class _ExponentFloatLoader(_HydraFloatLoader):
    """For a verl YAML config, its numbers as OmegaConf's YAML loader reads them for verl:
    its floats (`_HydraFloatLoader`: a run verl names `1000.0` was converted as `1e3`), and
    YAML 1.1's octal and base-60 numbers are the numbers verl gets (`012` is 10, `1:30` 90),
    where mfsdp's own configs refuse them (they were refused here as if verl read them
    otherwise)."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        return BoundedLoader.construct_yaml_int(self, node)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        return BoundedLoader.construct_yaml_float(self, node)


_ExponentFloatLoader.add_constructor(YAML_TAG + "int", _ExponentFloatLoader.construct_yaml_int)
_ExponentFloatLoader.add_constructor(YAML_TAG + "float", _ExponentFloatLoader.construct_yaml_float)


def parse_yaml(
    text: str,
    source: str,
    budget: ExpansionBudget | None = None,
    numbers_as_text: bool = False,
    exponent_floats: bool = False,
    hydra_floats: bool = False,
) -> Any:
    """One YAML document of a config as plain data (None for an empty one), or
    YAMLConfigError starting with `source`; its expansion is charged to `budget` (a fresh
    one, of MAX_EXPANDED_CHARS, when None). `numbers_as_text`: its numbers are the text
    written (`_NumbersAsTextLoader`); `exponent_floats`: its numbers as verl's OmegaConf
    reads them (`_ExponentFloatLoader`); `hydra_floats`: mfsdp's reading but `1e-5` a float,
    as Hydra reads it (`_HydraFloatLoader`)."""
    if budget is None:
        budget = ExpansionBudget(max_chars=MAX_EXPANDED_CHARS)
    loader: type[_ConfigLoader] = _ConfigLoader
    if numbers_as_text:
        loader = _NumbersAsTextLoader
    elif exponent_floats:
        loader = _ExponentFloatLoader
    elif hydra_floats:
        loader = _HydraFloatLoader
    return bounded_yaml.parse_yaml(text, source, YAMLConfigError, budget, loader)


class _ConfigDumper(yaml.SafeDumper):
    """YAML 1.1's writer, quoting also the text that Hydra's float rule reads as a number
    (`_HydraFloatLoader`): a run's `model.overrides` text `'1e5'` was written bare to its
    config.yaml, and that file given back (`--config RUN/config.yaml`, a resume) read it as
    the float 100000.0. PyYAML quotes text its own resolvers would read otherwise; this one
    resolves as every reader of a config does."""


_ConfigDumper.add_implicit_resolver(YAML_TAG + "float", _HYDRA_FLOAT, _HYDRA_FLOAT_FIRST)


def dump_yaml(data: Any) -> str:
    """`data` (plain dicts, lists and scalars) as YAML that `parse_yaml`, with or without
    `hydra_floats`, reads back as `data`: keys in the order given."""
    return yaml.dump(data, Dumper=_ConfigDumper, sort_keys=False)


def read_yaml_file(path: str | os.PathLike) -> Any:
    """The YAML document in a regular file of at most MAX_CONFIG_BYTES of UTF-8."""
    return parse_yaml(read_config_text(path), str(path))


def read_config_text(path: str | os.PathLike) -> str:
    """The text of a config file: a regular file of at most MAX_CONFIG_BYTES of UTF-8, for
    a reader that parses it as the keys in it call for (a verl config as verl reads it)."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # said with its kind, as every such refusal is
            raise YAMLConfigError(f"{path}: {kind_name(info.st_mode)}, not a regular file")
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        hint = missing_hint(path) if err.errno == errno.ENOENT else ""
        raise YAMLConfigError(f"{path}: cannot read config ({err.strerror}){hint}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise YAMLConfigError(f"{path}: over {MAX_CONFIG_BYTES >> 20} MiB; not a config file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise YAMLConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    return text


__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_EXPANDED_CHARS",
    "MAX_INT_DIGITS",
    "ExpansionBudget",
    "YAMLConfigError",
    "dump_yaml",
    "parse_yaml",
    "read_config_text",
    "read_yaml_file",
]
