"""A verl critic's value head: what a critic holds where an actor has its output layer.

verl's Megatron critic builds the actor's GPTModel and replaces its `output_layer` with
`LinearForLastLayer(hidden_size, 1)` (verl/models/mcore/model_initializer.py; Megatron-
Bridge's value-head hook in newer verl): a plain linear of one output, weight [1, hidden],
with a bias [1] where the class was built with one (verl's own class defaults to a bias,
Megatron-Bridge's has none). The replacement is made whatever the model's tying, so a
critic of a tied model holds it too. Everything else is the actor's backbone, checked
against the config as an actor's is, but for the output layer, which is no vocabulary
head: its rows are not vocab_size, and a critic holding a vocabulary-sized one is an
actor's copy. Export refuses a critic (it is no language model); validate and inspect read
it as this.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from mfsdp_ckpt.format import state_keys
from mfsdp_ckpt.storage.reader import CheckpointReader

WEIGHT, BIAS = "output_layer.weight", "output_layer.bias"  # Megatron-core module paths
CRITIC = "critic"
MADE_BY = "verl's LinearForLastLayer(hidden_size, 1)"


@dataclass(frozen=True)
class ValueHead:
    """A critic's value head as stored: module path -> stored key, and their shapes."""

    keys: dict[str, str]
    shapes: dict[str, tuple[int, ...]]

    def summary(self) -> str:
        """`output_layer.weight 1x64, output_layer.bias 1`, for inspect."""
        return ", ".join(
            f"{path} {'x'.join(map(str, shape)) or 'scalar'}" for path, shape in self.shapes.items()
        )


def value_head(reader: CheckpointReader, roots: state_keys.StateRoots) -> ValueHead:
    """The model tensors a critic holds in its output layer's place (none: empty)."""
    keys = {
        path: key
        for key in roots.weight_keys(reader.tensors)
        if (path := roots.module_path(key)) in (WEIGHT, BIAS)
    }
    return ValueHead(keys, {path: tuple(reader.tensors[key].shape) for path, key in keys.items()})


def head_problems(head: ValueHead, hidden: Any) -> list[tuple[str, str]]:
    """(where, what) for each way the head is not a value head of a model of `hidden`
    (the config's hidden_size; not an integer: the weight's columns are not checked)."""
    weight = head.keys.get(WEIGHT)
    if weight is None:
        return [("", f"no {WEIGHT}: a verl critic saves its value head there ({MADE_BY})")]
    columns = hidden if isinstance(hidden, int) and not isinstance(hidden, bool) else None
    problems = []
    shape = head.shapes[WEIGHT]
    if len(shape) != 2 or shape[0] != 1 or (columns is not None and shape[1] != columns):
        wanted = f"(1, {columns if columns is not None else 'hidden_size'})"
        lm = " (a vocabulary head: an actor's weights saved as the critic?)" if shape[0] > 1 else ""
        problems.append((f"[{weight}]", f"shape {shape}, but a value head is {wanted}{lm}"))
    bias = head.keys.get(BIAS)
    if bias is not None and head.shapes[BIAS] != (1,):
        wrong = f"shape {head.shapes[BIAS]}, but a value head's bias is (1,)"
        problems.append((f"[{bias}]", wrong))
    return problems


def backbone(reader: CheckpointReader, head: ValueHead) -> CheckpointReader:
    """`reader` with the value head's tensors left out of its table: the actor's model
    without an output layer, which plans as a tied model's (files and objects shared)."""
    view = copy.copy(reader)
    view.tensors = {k: e for k, e in reader.tensors.items() if k not in head.keys.values()}
    return view


def backbone_config(config: Any) -> Any:
    """`config` as the critic's backbone is checked: tied, so no output layer is expected
    (the stored one is the value head, checked apart)."""
    tied = copy.copy(config)
    tied.tie_word_embeddings = True
    return tied
