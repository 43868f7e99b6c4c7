"""How a config value is spelt in an error line: as YAML writes it, the language the user
wrote it in.

A config file is YAML, and Python's spelling of what YAML read is not what was written:
`device: npu` was quoted back as `'npu'`, `lr: true` as `True`, `null` as `None`, and a
list's strings each in Python quotes (`['a', 'b c']`), while a command-line override is
quoted as typed (`trainer.shown_value`). Both now read as YAML: a string as written (in
quotes only where YAML needs them to keep it a string: `'true'`), `true`/`false`, `null`,
a list as `[a, b c]`, a mapping as `{a: 1}`.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_DOCUMENT_END = "\n...\n"  # PyYAML ends a lone scalar's document with it
_LINE_BREAKS = frozenset("\n\r\x85\u2028\u2029")


class _OneLineDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, a string holding a line break double-quoted (`"a\\nb"`): its
    plain or single-quoted form runs over several lines."""


# A number as YAML 1.2 and Hydra read it, which YAML 1.1 (PyYAML) leaves as text and would
# write plain: `5e5`. Spelt in quotes, as the text it is: plain, a user reads a number
_YAML12_NUMBER = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = '"' if _LINE_BREAKS.intersection(text) else None
    if style is None and _YAML12_NUMBER.fullmatch(text):
        style = "'"
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_OneLineDumper.add_representer(str, _represent_str)


def yaml_spelling(value: Any) -> str:
    """`value` written as YAML on one line (flow style, as `yaml.safe_dump` writes it); a value
    YAML has no spelling for (an object of a rule's making) is Python's `repr`. An integer
    of more digits than Python writes raises ValueError, as `repr` does."""
    try:
        text = yaml.dump(
            value,
            Dumper=_OneLineDumper,
            default_flow_style=True,
            width=float("inf"),
            allow_unicode=True,
        )
    except (yaml.YAMLError, RecursionError):  # a list nested past the representer's recursion
        return repr(value)
    text = text.removesuffix(_DOCUMENT_END).removesuffix("\n")
    # a block scalar (`!!binary |` and its lines) is no one-line spelling
    return repr(value) if _LINE_BREAKS.intersection(text) else text
