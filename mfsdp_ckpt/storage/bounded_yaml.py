"""YAML read as plain data under bounds, for every YAML mfsdp reads: a run's config (through
`trainer.config_yaml`, which adds what a config file must also be) and a Megatron-Bridge
checkpoint's `run_config.yaml`. It lives here, not in the trainer, because reading a
checkpoint never needs the trainer; both read through this one loader, so a bound added
for one holds for the other.

PyYAML's `safe_load` builds no objects, but it bounds nothing else. Anything that is not a
small plain document is refused in one line starting with its source: `!!python/...` tags,
more than MAX_ALIASES aliases, nesting past MAX_DEPTH, a key given twice in one mapping
(PyYAML keeps the last silently), an integer of more than MAX_INT_DIGITS digits in any of
YAML's forms, and a value its explicit tag cannot make (`!!int ""` raised IndexError,
`!!bool x` KeyError, a 13th month ValueError: PyYAML's constructors check nothing past
what its implicit resolvers match).

Why count expansion and not only aliases: a 581-byte "billion laughs" document has a few
dozen aliases, each naming a list of aliases; PyYAML shares the repeated nodes, so parsing
is cheap, but everything that walks the result (type checks, `asdict`, writing it back,
the repr in an error) visits every repetition. The size of the tree as walked is what must
be small: its nodes, and its characters too, since one alias may stand for a long string
(a 3.7 KB config of 9,000 references to one 2 KB string, 4 levels of lists deep, wrote a
20 MB config.yaml). Each reader sizes its `ExpansionBudget` to what its files may hold;
documents read together (the values of one launch script) share one.

Which numbers a document means is left to its reader: a config refuses YAML 1.1's octal
and base-60 forms, which Hydra reads otherwise; a non-finite float is refused by the field
that takes it, naming the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpFailedError

MAX_ALIASES = 1000
MAX_EXPANDED_NODES = 100_000  # scalars, lists and mappings, counting each alias's expansion
MAX_EXPANDED_CHARS = 1 << 20  # scalars' characters (keys too), the same way
MAX_DEPTH = 64
# Python's default limit on a decimal integer's digits, past which int() will not read one
# nor str() write one (so no message could quote it): in any of YAML's forms (`0x`, `0b`,
# octal, base 60), neither the digits written nor the value's decimal digits may exceed it.
MAX_INT_DIGITS = 4300
_TOO_LONG_INT = 10**MAX_INT_DIGITS  # the least integer of more decimal digits
YAML_TAG = "tag:yaml.org,2002:"
_PYTHON_TAG = YAML_TAG + "python/"
# PyYAML's contexts for what must be closed: reported where they opened
_LEFT_OPEN = ("flow sequence", "flow mapping", "quoted scalar")
_CONTEXT_WORDS = re.compile(r"^while \w+ (an? )?")
_TAB = "a tab, where YAML takes spaces only (to indent, and after a key's colon)"
# PyYAML's context for a stream of several documents, and what is said in its place
_ONE_DOCUMENT = "expected a single document in the stream"
_ONE_DOCUMENT_WORDS = "a second YAML document starts here; the file must hold one"


class YAMLRefused(MfsdpFailedError):
    """What a loader refuses, in words without the source; `parse_yaml` turns it into the
    reader's own error, prefixed with the source (its own kind, a failed read, is for a
    caller that lets it through)."""


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses python tags, too many aliases and too deep nesting while
    composing, before anything is built; a key given twice, an integer too long and a value
    its tag cannot make while constructing. A reader may subclass it to refuse more (its
    own refusals raise YAMLRefused)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.aliases, self.depth = 0, 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise YAMLRefused(f"more than {MAX_ALIASES} aliases; refusing")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise YAMLRefused(f"nested deeper than {MAX_DEPTH} levels; refusing")
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if isinstance(node.tag, str) and node.tag.startswith(_PYTHON_TAG):
            shown = "!!python/" + node.tag[len(_PYTHON_TAG) :]
            raise YAMLRefused(f"YAML tag {cut_to(repr(shown), 80)} is not allowed")
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        """A key given twice in one mapping is refused: PyYAML keeps the last silently, so a
        second `optim:` section would drop every key of the first. Keys a `<<` merge brings
        in may still be overridden, as YAML means them to be."""
        seen: set = set()
        for key_node, _value in node.value:
            if key_node.tag == YAML_TAG + "merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise YAMLRefused(f"key {cut_to(repr(key), 80)} given twice (line {line})")
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """A value its tag cannot be made of (`!!int ""`, `!!float abc`, a 13th month in a
        date) is one line naming its line, not the constructor's ValueError, IndexError,
        KeyError, OverflowError or AttributeError."""
        try:
            return super().construct_object(node, deep)
        except YAMLRefused:
            raise
        except (ValueError, LookupError, ArithmeticError, AttributeError) as err:
            shown = (
                cut_to(repr(node.value), 80) if isinstance(node, yaml.ScalarNode) else "the value"
            )
            tag = str(node.tag).replace(YAML_TAG, "!!")
            raise YAMLRefused(
                f"{shown} at line {node.start_mark.line + 1} is not a valid {cut_to(tag, 80)}"
                f" ({cut_to(str(err), 80)})"
            ) from None

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """An integer of more than MAX_INT_DIGITS digits, as written or in decimal, is one
        line naming where it is, before it is computed (a base-60 one costs time quadratic
        in its length) or quoted: `0b` + 20,000 ones reads, but no message or check could
        print it."""
        line = node.start_mark.line + 1
        text = str(node.value).lstrip("+-").replace("_", "")
        written = text[2:] if text[:2] in ("0b", "0x") else text.replace(":", "")
        if len(written) > MAX_INT_DIGITS:
            raise YAMLRefused(f"integer at line {line} has {len(written)} digits; refusing")
        value = super().construct_yaml_int(node)
        if abs(value) >= _TOO_LONG_INT:
            raise YAMLRefused(
                f"integer at line {line} has more than {MAX_INT_DIGITS} digits in decimal; refusing"
            )
        return value


BoundedLoader.add_constructor(YAML_TAG + "int", BoundedLoader.construct_yaml_int)


@dataclass
class ExpansionBudget:
    """What the documents parsed with it may expand to, all told (nodes and scalar
    characters, each alias counted with its whole expansion), and what they have so far."""

    max_nodes: int = MAX_EXPANDED_NODES
    max_chars: int = MAX_EXPANDED_CHARS
    nodes: int = 0
    chars: int = 0

    def check(self, nodes: int, chars: int, aliased: bool) -> None:
        """YAMLRefused when a document of `nodes` and `chars` more would be over the budget
        (checked at every node: a bomb stops at the cap, never counted to its end);
        `aliased`: whether the document has aliases, which the words then blame."""
        how = "expands to over" if aliased else "holds over"
        via = " through anchors/aliases" if aliased else ""
        earlier = " (with the values read before it)" if self.nodes else ""
        if self.nodes + nodes > self.max_nodes:
            raise YAMLRefused(f"{how} {self.max_nodes} values{via}{earlier}")
        if self.chars + chars > self.max_chars:
            raise YAMLRefused(f"{how} {self.max_chars} characters{via}{earlier}; refusing")


def _charge_expansion(node: yaml.Node, budget: ExpansionBudget, aliased: bool) -> None:
    """Charge `budget` with the nodes and scalar characters of the tree as walked, each
    alias counted with its whole expansion, before anything is built. Sizes of shared nodes
    are memoised, so this is linear in the document."""
    sizes: dict[int, tuple[int, int]] = {}

    def size(current: yaml.Node) -> tuple[int, int]:
        known = sizes.get(id(current))
        if known is not None:
            return known
        nodes, chars = 1, len(current.value) if isinstance(current, yaml.ScalarNode) else 0
        budget.check(nodes, chars, aliased)
        for child in _children(current):
            child_nodes, child_chars = size(child)
            nodes, chars = nodes + child_nodes, chars + child_chars
            budget.check(nodes, chars, aliased)
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


def parse_yaml(
    text: str,
    source: str,
    error: type[Exception],
    budget: ExpansionBudget | None = None,
    loader: type[BoundedLoader] = BoundedLoader,
) -> Any:
    """One YAML document as plain data (None for an empty one), or `error` in one line
    starting with `source`. Its expansion is charged to `budget` (a fresh one when None)
    before it is built. The loader is made inside the `try`: PyYAML checks the text for
    characters YAML does not allow (an escape, a NUL) as it is made."""
    if budget is None:
        budget = ExpansionBudget()
    made = None
    try:
        made = loader(text)
        node = made.get_single_node()
        if node is None:
            return None
        _charge_expansion(node, budget, made.aliases > 0)
        return made.construct_document(node)
    except YAMLRefused as err:
        raise error(f"{source}: {err}") from None
    except yaml.YAMLError as err:
        raise error(f"{source}: not valid YAML {describe_yaml_error(err)}") from None
    except RecursionError:
        raise error(f"{source}: nested too deeply; refusing") from None
    finally:
        if made is not None:
            made.dispose()


def describe_yaml_error(err: yaml.YAMLError) -> str:
    """`at line L, column C: <what>`, so a user finds the typo without a YAML debugger
    (PyYAML's own first line is only its context, e.g. "while parsing a block mapping").

    The line is the problem's: a key indented one space too far is wrong where it stands,
    while PyYAML's context is the block that holds it, often the file's first key; that
    block is named after it, "(in the block mapping starting at line N)". Something left
    open (a bracket, a quote) is the exception: PyYAML finds the problem only where the
    text runs out or goes on past it, so it is reported where it opened."""
    context, problem = getattr(err, "context", None), getattr(err, "problem", None)
    context_mark = getattr(err, "context_mark", None)
    problem_mark = getattr(err, "problem_mark", None)
    if problem and "'\\t'" in problem:  # PyYAML's words do not say what to do about it
        context, problem = None, _TAB
    opened = context_mark is not None and context is not None and context.endswith(_LEFT_OPEN)
    if opened or problem_mark is None:
        mark = context_mark
        what = ", ".join(part for part in (context, problem) if part)
    else:
        mark, what = problem_mark, problem or context or ""
        if problem and context and context_mark and context_mark.line != problem_mark.line:
            block = _CONTEXT_WORDS.sub("", context)  # "while parsing a block mapping": its name
            what += f" (in the {block} starting at line {context_mark.line + 1})"
            if context == _ONE_DOCUMENT:  # its words are no block's: "(in the expected a ..."
                what = _ONE_DOCUMENT_WORDS
    if mark is None or not what:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"({first})"
    return f"at line {mark.line + 1}, column {mark.column + 1}: {what}"


__all__ = [
    "MAX_ALIASES",
    "MAX_DEPTH",
    "MAX_EXPANDED_CHARS",
    "MAX_EXPANDED_NODES",
    "MAX_INT_DIGITS",
    "YAML_TAG",
    "BoundedLoader",
    "ExpansionBudget",
    "YAMLRefused",
    "describe_yaml_error",
    "parse_yaml",
]
