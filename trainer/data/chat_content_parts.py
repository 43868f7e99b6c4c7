"""A chat's null contents in the form vLLM hands them to a chat template reading content
as parts, for a chat that template cannot render as text.

Turns reach every template as text, as verl's datasets hand them to apply_chat_template
(vLLM then gets token ids). vLLM's chat completions instead hand a template that loops over
a turn's content (`_detect_content_format` in vllm/renderers/hf.py: its "openai" format)
every content as a list of text parts, and a null content, OpenAI's form of a turn that
only calls tools, as no parts. Given parts everywhere, templates that also read content as
text rendered other text or raised: Llama-3.2-Vision's `messages[0]['content']|trim` wrote
the list's repr as its system prompt, Mistral-Small-3.1's `message['content'] + eos_token`
raised on every assistant turn. So only where the text fails to render (Gemma 3's
raises "Invalid content type" on a null content) is each null content handed as vLLM hands
it: no parts, a tool turn's as "" (vLLM joins a tool turn's parts to text).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterator

import jinja2
from jinja2 import nodes

from trainer.data.template_sandbox import BoundedSandbox


def with_null_content_as_parts(turns: list[dict], source: str) -> list[dict] | None:
    """`turns` with each null content as vLLM hands it to the template `source`, where that
    reads content as parts (`reads_content_parts`): no parts, a tool turn's "". None where
    nothing changes (no null content, or a template reading text)."""
    if all(turn["content"] is not None for turn in turns) or not reads_content_parts(source):
        return None
    return [
        turn
        if turn["content"] is not None
        else {**turn, "content": "" if turn["role"] == "tool" else []}
        for turn in turns
    ]


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
    where one is set into a target that is no single name. Each name is followed once:
    names set from each other (`{% set a = messages %}{% set messages = a %}`) were
    followed for ever (as vLLM's `_iter_nodes_assign_var_or_elems` follows them), so that
    every row took TEMPLATE_SECONDS and was refused."""
    names = [name]
    pending = deque([name])
    while pending:
        source = pending.popleft()
        for assign in root.find_all(nodes.Assign):
            if _reads(assign.node, source):
                if not isinstance(assign.target, nodes.Name):
                    return None
                if assign.target.name not in names:
                    names.append(assign.target.name)
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
