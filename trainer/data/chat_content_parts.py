"""Turns' content in the form vLLM hands it to a chat template: text, or OpenAI's list of
parts.

vLLM's chat completions read the template before rendering (`_detect_content_format` in
vllm/renderers/hf.py): one that loops over a turn's content (Gemma 3's `{%- for item in
message['content'] -%}`) is given every content as a list of parts (its "openai" format),
`[{"type": "text", "text": ...}]`, and a null content (OpenAI's form of a turn that only
calls tools) as `[]`; a tool turn's parts are joined back to text. Handed the text
instead, such a template may take another branch than the served model's prompt did, and a
null content it cannot take (Gemma 3's raised "Invalid content type") was refused, though
vLLM serves it. Other templates ("string" format) are handed the text as it is, a null
content as None, as verl passes it: vLLM's `""` renders alike in templates that test the
content's truth, and DeepSeek-R1-Distill's renders a turn's calls only under a None.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterable, Iterator

import jinja2
from jinja2 import nodes

from trainer.data.template_sandbox import BoundedSandbox


def with_content_as_served(turns: Iterable[dict], source: str) -> list[dict]:
    """`turns` with each content as vLLM hands it to the template `source`: where that reads
    content as parts (`reads_content_parts`), text as one text part and null as no parts
    (a tool turn's text as it is); otherwise `turns` as they are."""
    turns = list(turns)
    if not reads_content_parts(source):
        return turns
    served = []
    for turn in turns:
        content = turn["content"]  # text, or null (`checked_turns`)
        if turn["role"] == "tool":
            parts: str | list = "" if content is None else content
        else:
            parts = [] if content is None else [{"type": "text", "text": content}]
        served.append({**turn, "content": parts})
    return served


@functools.lru_cache(maxsize=8)
def reads_content_parts(source: str) -> bool:
    """Whether vLLM 0.32 hands the template `source` its turns' content as a list of parts
    (`_detect_content_format` finds a loop over a turn's content): a loop over `X.content`
    or `X['content']`, X a loop variable over `messages` or a variable set from it (a
    slice, a filter of it), over a macro's parameter given such a content, or over a
    variable named `content` outside a macro. A template that does not parse, or whose
    loops or assignments vLLM cannot read (a target that is no single name: vLLM's assert
    fails), is given text, as vLLM gives it."""
    try:
        root = BoundedSandbox(limit=0).parse(source)  # parsed only: nothing is rendered
    except (jinja2.TemplateError, RecursionError):
        return False
    names = _named_from(root, "messages")
    turns = None if names is None else _loop_names(root, names)
    if turns is None:
        return False
    loop = next(_content_loops(root, turns), None)
    return loop is not None and isinstance(loop.target, nodes.Name)


def _content_loops(root: nodes.Template, turns: list[str]) -> Iterator[nodes.For]:
    """The loops over a turn's content (each of `turns` a loop variable over the turns), in
    the order vLLM's `_iter_nodes_assign_content_item` finds them."""
    params_by_loop: dict[int, set[str]] = {}
    in_macros: set[int] = set()
    for macro in root.find_all(nodes.Macro):
        params = _content_params(root, macro, turns)
        for loop in macro.find_all(nodes.For):
            in_macros.add(id(loop))
            if params:
                params_by_loop[id(loop)] = params
    for loop in root.find_all(nodes.For):
        over = loop.iter
        name = over.name if isinstance(over, nodes.Name) else ""
        if (
            any(_reads(over, turn, "content") for turn in turns)
            or name in params_by_loop.get(id(loop), set())
            or (id(loop) not in in_macros and name == "content")
        ):
            yield loop


def _content_params(root: nodes.Template, macro: nodes.Macro, turns: list[str]) -> set[str]:
    """The parameters of `macro` that some call of it is given a turn's content in."""
    names = [arg.name for arg in macro.args]
    params = set()
    for call in root.find_all(nodes.Call):
        if not (isinstance(call.node, nodes.Name) and call.node.name == macro.name):
            continue
        for at, value in enumerate(call.args[: len(names)]):
            if any(_reads(value, turn, "content") for turn in turns):
                params.add(names[at])
        for keyword in call.kwargs:
            if keyword.key in names and any(
                _reads(keyword.value, turn, "content") for turn in turns
            ):
                params.add(keyword.key)
    return params


def _named_from(root: nodes.Template, name: str) -> list[str] | None:
    """`name` and every variable set from it, or from one of those, at any remove; None
    where one is set into a target that is no single name."""
    names = [name]
    pending = deque([name])
    while pending:
        source = pending.popleft()
        for assign in root.find_all(nodes.Assign):
            if _reads(assign.node, source):
                if not isinstance(assign.target, nodes.Name):
                    return None
                names.append(assign.target.name)
                if assign.target.name != source:
                    pending.append(assign.target.name)
    return names


def _loop_names(root: nodes.Template, names: list[str]) -> list[str] | None:
    """The variable of each loop over one of `names`; None where one is no single name."""
    found = []
    for loop in root.find_all(nodes.For):
        if any(_reads(loop.iter, name) for name in names):
            if not isinstance(loop.target, nodes.Name):
                return None
            found.append(loop.target.name)
    return found


def _reads(node: nodes.Node, name: str, key: str | None = None) -> bool:
    """Whether `node` is variable `name` (its item `key`, where given), through filters,
    tests and slices, as vLLM's `_is_var_or_elems_access` reads it."""
    if isinstance(node, nodes.Filter):
        return node.node is not None and _reads(node.node, name, key)
    if isinstance(node, nodes.Test):
        return _reads(node.node, name, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _reads(node.node, name, key)
    if key is None:
        return _is_name(node, name)
    if isinstance(node, nodes.Getitem):
        return (
            _is_name(node.node, name)
            and isinstance(node.arg, nodes.Const)
            and node.arg.value == key
        )
    return isinstance(node, nodes.Getattr) and _is_name(node.node, name) and node.attr == key


def _is_name(node: nodes.Node, name: str) -> bool:
    return isinstance(node, nodes.Name) and node.ctx == "load" and node.name == name
