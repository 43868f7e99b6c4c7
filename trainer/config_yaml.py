"""YAML for run configs, with bounds: a config is a few kilobytes of plain data, so anything
that is not (a file too big to be a config, bytes that are not UTF-8, anchors that expand
into a billion nodes, `!!python/...` tags, nesting deeper than any config) is refused with
one line instead of hanging, eating memory, or printing a traceback.

Why count expansion and not only aliases: a 581-byte "billion laughs" document has a few
dozen aliases, each naming a list of aliases; PyYAML shares the repeated nodes, so parsing
is cheap, but everything that walks the result (type checks, `asdict`, writing the resolved
config back) visits every repetition. The size of the tree as walked is what must be small:
its nodes, and its characters too, since one alias may stand for a long string (a 3.7 KB
config of 9,000 references to one 2 KB string, 4 levels of lists deep, wrote a 20 MB
config.yaml and HF config.json). As walked, a config holds no more text than a config file
may (MAX_EXPANDED_CHARS = MAX_CONFIG_BYTES). Documents read together (the values of one
launch script) share one `ExpansionBudget`.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import Any

import yaml

from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.format.closest_path import closest_existing

MAX_CONFIG_BYTES = 1 << 20
MAX_ALIASES = 1000
MAX_EXPANDED_NODES = 100_000  # scalars, lists and mappings, counting each alias's expansion
MAX_EXPANDED_CHARS = MAX_CONFIG_BYTES  # scalars' characters (keys too), the same way
MAX_DEPTH = 64
_PYTHON_TAG = "tag:yaml.org,2002:python/"


class YAMLConfigError(MfsdpUsageError, ValueError):
    """The text is not a small plain YAML document; the message starts with its source."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses python tags, too many aliases and too deep nesting while
    composing, before anything is built."""

    def __init__(self, stream: str, source: str):
        super().__init__(stream)
        self.source, self.aliases, self.depth = source, 0, 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise YAMLConfigError(f"{self.source}: more than {MAX_ALIASES} aliases; refusing")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise YAMLConfigError(f"{self.source}: nested deeper than {MAX_DEPTH} levels; refusing")
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if isinstance(node.tag, str) and node.tag.startswith(_PYTHON_TAG):
            shown = "!!python/" + node.tag[len(_PYTHON_TAG) :]
            raise YAMLConfigError(f"{self.source}: YAML tag {shown[:80]!r} is not allowed")
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        """A key given twice in one mapping is refused: PyYAML keeps the last silently, so a
        second `optim:` section would drop every key of the first. Keys a `<<` merge brings
        in may still be overridden, as YAML means them to be."""
        seen: set = set()
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(
                key_node, yaml.ScalarNode
            ):
                continue
            key = self.construct_object(key_node)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise YAMLConfigError(f"{self.source}: key {key!r:.80} given twice (line {line})")
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """An integer too long for Python to read from text (over 4300 digits) is one line
        naming where it is, not int()'s ValueError; one that reads is range-checked by its
        field."""
        digits = str(node.value).lstrip("+-").replace("_", "")
        if ":" in digits or (len(digits) > 1 and digits[0] == "0" and digits.isdigit()):
            line = node.start_mark.line + 1  # `010` was 8 (octal), `1:00` 60 (base 60)
            raise YAMLConfigError(
                f"{self.source}: {node.value!r} at line {line} is an integer only in YAML 1.1's"
                f" octal or base-60 forms, read as {super().construct_yaml_int(node)} (Hydra and"
                " YAML 1.2 read it otherwise); write the number plainly, or quote it for text"
            )
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            line = node.start_mark.line + 1
            raise YAMLConfigError(
                f"{self.source}: integer at line {line} has {len(node.value)} digits; refusing"
            ) from None


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


@dataclass
class ExpansionBudget:
    """What the documents parsed with it may expand to, all told (nodes and scalar
    characters, each alias counted with its whole expansion), and what they have so far."""

    max_nodes: int = MAX_EXPANDED_NODES
    max_chars: int = MAX_EXPANDED_CHARS
    nodes: int = 0
    chars: int = 0

    def check(self, nodes: int, chars: int, source: str) -> None:
        """YAMLConfigError naming `source` when a document of `nodes` and `chars` more would
        be over the budget (checked at every node: a bomb stops at the cap, never counted
        to its end)."""
        earlier = " (with the values read before it)" if self.nodes else ""
        if self.nodes + nodes > self.max_nodes:
            raise YAMLConfigError(
                f"{source}: expands to over {self.max_nodes} values through"
                f" anchors/aliases{earlier}"
            )
        if self.chars + chars > self.max_chars:
            raise YAMLConfigError(
                f"{source}: expands to over {self.max_chars} characters through"
                f" anchors/aliases{earlier}; refusing"
            )


def _expanded_size(node: yaml.Node, source: str, budget: ExpansionBudget) -> None:
    """Charge `budget` with the nodes and scalar characters of the tree as walked, each
    alias counted with its whole expansion, before anything is built. Sizes of shared nodes
    are memoised, so this is linear in the document."""
    sizes: dict[int, tuple[int, int]] = {}

    def size(current: yaml.Node) -> tuple[int, int]:
        known = sizes.get(id(current))
        if known is not None:
            return known
        nodes, chars = 1, len(current.value) if isinstance(current, yaml.ScalarNode) else 0
        budget.check(nodes, chars, source)
        for child in _children(current):
            child_nodes, child_chars = size(child)
            nodes, chars = nodes + child_nodes, chars + child_chars
            budget.check(nodes, chars, source)
        sizes[id(current)] = (nodes, chars)
        return nodes, chars

    nodes, chars = size(node)
    budget.nodes += nodes
    budget.chars += chars


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def parse_yaml(text: str, source: str, budget: ExpansionBudget | None = None) -> Any:
    """One YAML document as plain data (None for an empty one), or YAMLConfigError. Its
    expansion is charged to `budget` (a fresh one when None) before it is built. The
    loader is made inside the `try`: PyYAML checks the text for characters YAML does not
    allow (an escape, a NUL) as it is built."""
    loader = None
    try:
        loader = _BoundedLoader(text, source)
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, source, budget or ExpansionBudget())
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        raise YAMLConfigError(f"{source}: not valid YAML {describe_yaml_error(err)}") from None
    except RecursionError:
        raise YAMLConfigError(f"{source}: nested too deeply; refusing") from None
    finally:
        if loader is not None:
            loader.dispose()


def describe_yaml_error(err: yaml.YAMLError) -> str:
    """`at line L, column C: <what>`, so a user finds the typo without a YAML debugger
    (PyYAML's own first line is only its context, e.g. "while parsing a flow sequence").
    An unclosed bracket is reported where it opened, not at the end of the file."""
    context, problem = getattr(err, "context", None), getattr(err, "problem", None)
    mark = getattr(err, "context_mark", None) or getattr(err, "problem_mark", None)
    what = ", ".join(part for part in (context, problem) if part)
    if problem and "'\\t'" in problem:  # PyYAML's words do not say what to do about it
        what = "a tab, where YAML takes spaces only (to indent, and after a key's colon)"
    if mark is None or not what:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"({first})"
    return f"at line {mark.line + 1}, column {mark.column + 1}: {what}"


def read_yaml_file(path: str | os.PathLike) -> Any:
    """The YAML document in a regular file of at most MAX_CONFIG_BYTES of UTF-8."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise YAMLConfigError(f"{path}: not a regular file")
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        closest = closest_existing(path) if err.errno == errno.ENOENT else None
        hint = f"; did you mean {closest}?" if closest is not None else ""
        raise YAMLConfigError(f"{path}: cannot read config ({err.strerror}){hint}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise YAMLConfigError(f"{path}: over {MAX_CONFIG_BYTES >> 20} MiB; not a config file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise YAMLConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    return parse_yaml(text, str(path))
