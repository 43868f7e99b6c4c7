"""Where a checkpoint's model weights and optimizer state lie among its stored keys.

DCP flattens the saved state dict, so a model weight is stored as `<entry>.<module path>`
and its Adam moments as `<optimizer entry>.state.<module path>.exp_avg`. The entry is
`model` for mfsdp, Megatron-LM and torch's plain `dcp.save({"model": ...})`; verl and
Megatron name it `model0`, `model1`, ... when a model is built in several virtual-pipeline
chunks; torch's own DCP recipe nests it under the app's key (`dcp.save({"app":
AppState(model, optimizer)})` stores `app.model.model.layers.0...` beside
`app.optim.state.model.layers.0....exp_avg`); `dcp.save(model.state_dict())` has no entry
at all. `state_roots` finds the entries by the names beneath them, so each reader asks
one place instead of matching prefixes of its own.

Wrappers insert path segments of their own (`module.` for Megatron-FSDP and DDP,
`_orig_mod.` for torch.compile, `_fsdp_wrapped_module.` / `_checkpoint_wrapped_module.`
for FSDP1 and activation checkpointing); `hf_name` removes them to recover the name
`transformers` uses. Transformer Engine stores a `<module>._extra_state` entry per layer
(fp8 scaling bookkeeping): module state, not a weight, never optimized.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.format import megatron_flat_optimizer

MODEL_KEY_PREFIX = "model."  # the entry mfsdp itself writes
EXTRA_KEY_PREFIX = "extra."
WRAPPER_SEGMENTS = ("module", "_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")
# The first segment of a weight's module path: transformers' decoder models, and
# Megatron-core's GPTModel (with its multi-token prediction layers).
HF_ROOTS = ("model", "lm_head")
MCORE_ROOTS = ("embedding", "decoder", "output_layer", "mtp")
# What the optimizer's entry is called beside the model's: Megatron-LM, verl and mfsdp
# write `optimizer`, torch's DCP recipe `optim`.
OPTIMIZER_ENTRIES = ("optimizer", "optim")
# Training state a trainer saves beside the model that holds no weight, though it may hold
# tensors: mfsdp's `extra`, and the entries torchtitan's CheckpointManager writes beside a
# model it flattens to the top level (`components/checkpoint.py`: `lr_scheduler`,
# `dataloader`, `train_state` with its `step` and `ntokens_seen` tensors).
TRAINING_STATE_ENTRIES = ("extra", "lr_scheduler", "dataloader", "train_state")
NOT_WEIGHT_SUFFIXES = ("._extra_state",)  # Transformer Engine's fp8 bookkeeping
# (output layer, input embedding): the weights a tied model holds once under two names,
# in transformers' and Megatron-core's naming
TIED_PAIRS = (
    ("lm_head.weight", "embed_tokens.weight"),
    ("output_layer.weight", "embedding.word_embeddings.weight"),
)

# What a checkpoint without model weights lacks, for the messages that say so.
NO_MODEL_WEIGHTS = (
    "no Hugging Face or Megatron-core names at the top level or under a `model` entry"
    " (`model.`, `model0.`, `app.model.`)"
)

_MODEL_SEGMENT_RE = re.compile(r"model[0-9]*")  # `model`, or `model0`, `model1` (chunks)
# Megatron-LM's fsdp_dtensor save renames two kinds of parameters in the model and in
# `optimizer.state` only (fsdp_dtensor_checkpoint.py): `handle_swiglu_in_state_dict` splits
# a SwiGLU fc1 (dense, shared experts, TEGroupedMLP's `weight<E>`, SequentialMLP's) into
# `_w` / `_v` halves, and `handle_mtp_in_state_dict` stores an MTP layer's inner layer
# `mtp_model_layer` as `transformer_layer`. Its `param_to_group_meta` keeps the names
# the optimizer gives the parameters, unsplit and unrenamed.
_SWIGLU_HALF_RE = re.compile(r"(\.linear_fc1\.(?:weight|bias)[0-9]*)_[wv]$")
_MTP_INNER_RE = re.compile(r"^(mtp\.layers\.[0-9]+\.)transformer_layer\.")
_KNOWN_ROOTS = frozenset(HF_ROOTS + MCORE_ROOTS)
_SHOWN_ENTRIES = 3


class AmbiguousStateError(MfsdpUsageError, ValueError):
    """Two entries could each be the model (or the optimizer): which one is meant is not
    in the checkpoint, and picking one would read the other's weights silently (exit 2)."""


def hf_name(module_path: str) -> str:
    """`module.model.layers.0._orig_mod.mlp.up_proj.weight` ->
    `model.layers.0.mlp.up_proj.weight`."""
    return ".".join(part for part in module_path.split(".") if part not in WRAPPER_SEGMENTS)


def group_meta_name(module_path: str) -> str:
    """The name Megatron's `param_to_group_meta` records the parameter stored as
    `module_path` (wrappers removed) under: `decoder.layers.0.mlp.linear_fc1.weight` for
    the fc1 half `...linear_fc1.weight_w`, `mtp.layers.0.mtp_model_layer.<rest>` for
    `mtp.layers.0.transformer_layer.<rest>`; any other path unchanged."""
    path = _SWIGLU_HALF_RE.sub(r"\1", module_path)
    return _MTP_INNER_RE.sub(r"\1mtp_model_layer.", path)


@dataclass(frozen=True)
class StateRoots:
    """The model entries and the optimizer entry of one checkpoint's keys.

    `models` holds entry names without the trailing dot (`model`, `app.model`; `model0`,
    `model1` for virtual-pipeline chunks, always siblings); `("",)` is a bare model state
    dict saved at the top level, `()` no model at all. `optimizer` is the sibling entry
    holding the optimizer's state (`optimizer`, `app.optim`), or None.
    """

    models: tuple[str, ...]
    optimizer: str | None
    # Where per-parameter states lie under the optimizer entry (`state_prefixes`)
    state_prefixes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def parent(self) -> str:
        """The prefix the entries share (`app.` for `app.model`; "" at the top level)."""
        first = self.models[0] if self.models else ""
        return first.rpartition(".")[0] + "." if "." in first else ""

    @property
    def optimizer_state(self) -> str | None:
        """The (first) prefix of per-parameter optimizer tensors, `<optimizer>.state.` unless
        the optimizer nests its state (`state_prefixes`)."""
        if self.state_prefixes:
            return self.state_prefixes[0]
        return f"{self.optimizer}.state." if self.optimizer else None

    def state_path(self, key: str) -> str | None:
        """What follows the state prefix in `key` (`<param>.exp_avg`, or `<id>.exp_avg` for
        torch's own optimizer state dict), or None when `key` is no per-parameter state."""
        prefixes = self.state_prefixes or ((f"{self.optimizer}.state.",) if self.optimizer else ())
        for prefix in prefixes:
            if key.startswith(prefix):
                return key[len(prefix) :]
        return None

    def describe_models(self) -> str:
        """The model entries as a user reads them: `app.model`, or `the top level`."""
        if self.models == ("",):
            return "the top level"
        return ", ".join(self.models) if self.models else "none"

    def entry_of(self, key: str) -> str | None:
        """The model entry `key` lies under, or None (optimizer, extra, other state)."""
        if self.models == ("",):
            return None if key.startswith(self._beside_bare) else ""
        parent = self.parent
        if not key.startswith(parent):
            return None
        entry, dot, _ = key[len(parent) :].partition(".")
        return parent + entry if dot and parent + entry in self._entries else None

    def is_weight(self, key: str) -> bool:
        """A key under a model entry that holds a weight: not TE's `_extra_state`, nor a
        Megatron dp_reshardable optimizer buffer that Megatron-LM's inspector files under
        the model entry (`megatron_flat_optimizer`)."""
        return (
            self.entry_of(key) is not None
            and not key.endswith(NOT_WEIGHT_SUFFIXES)
            and not megatron_flat_optimizer.is_flat_bucket(key)
        )

    def weight_keys(self, keys: Iterable[str]) -> list[str]:
        """The stored keys that are model weights, in the order given."""
        return [key for key in keys if self.is_weight(key)]

    def path_in_entry(self, key: str) -> str:
        """`app.model.module.model.layers.0.mlp.up_proj.weight` ->
        `module.model.layers.0.mlp.up_proj.weight`: the entry removed."""
        entry = self.entry_of(key) or ""
        return key[len(entry) + 1 :] if entry else key

    def module_path(self, key: str) -> str:
        """`app.model.module.model.layers.0.mlp.up_proj.weight` ->
        `model.layers.0.mlp.up_proj.weight`: the entry and wrapper segments removed."""
        return hf_name(self.path_in_entry(key))

    def stored_name(self, module_path: str) -> str:
        """The key a weight of this module path would be stored under (in the first entry):
        what a message about a weight the checkpoint lacks names."""
        entry = self.models[0] if self.models else ""
        return f"{entry}.{module_path}" if entry else module_path

    def under_optimizer(self, key: str) -> bool:
        """Whether `key` lies under an optimizer entry beside the model's (`optim` or
        `optimizer`), whether or not it holds per-parameter tensors."""
        return key.startswith(self._optimizer_prefixes)

    @functools.cached_property
    def _optimizer_prefixes(self) -> tuple[str, ...]:
        return tuple(f"{self.parent}{name}." for name in OPTIMIZER_ENTRIES)

    @functools.cached_property
    def _entries(self) -> frozenset[str]:
        return frozenset(self.models)

    @functools.cached_property
    def _beside_bare(self) -> tuple[str, ...]:
        """What a bare model state dict saved at the top level is not: the optimizer's
        entry and the training state beside it (`TRAINING_STATE_ENTRIES`)."""
        return (*self._optimizer_prefixes, *(f"{name}." for name in TRAINING_STATE_ENTRIES))


def state_roots(keys: Iterable[str]) -> StateRoots:
    """Find the model entry and the optimizer entry among a checkpoint's tensor keys.

    A model entry is a key prefix ending in a `model` / `modelN` segment whose remaining
    paths start (wrapper segments removed) with a Hugging Face or Megatron-core root; of
    the prefixes one key offers, the shortest (`app.model.model.layers.0...` is entry
    `app.model`). Nothing under an optimizer segment counts: optimizer state is named by
    parameter, and a parameter path may itself read `model.model.layers`. Without such an
    entry, keys at the top level with such roots are a bare model state dict (entry "").
    `modelN` siblings are one model's virtual-pipeline chunks; entries under different
    parents (`a.model`, `b.model`) are AmbiguousStateError. The optimizer entry is the
    model entry's sibling `optimizer` or `optim` holding any tensor; both holding some is
    AmbiguousStateError too. Linear in the keys (one sort over the entries found).
    """
    names = [key for key in keys if not key.endswith(NOT_WEIGHT_SUFFIXES)]
    found: dict[str, str] = {}  # entry -> the first key under it
    for key in names:
        entry = _entry_of_key(key)
        if entry is not None:
            found.setdefault(entry, key)
    entries = _outermost(found)
    parents = {entry.rpartition(".")[0] for entry in entries}
    if len(parents) > 1:
        shown = first_of([f"{e} ([{found[e]}])" for e in entries], _SHOWN_ENTRIES)
        raise AmbiguousStateError(
            f"{len(entries)} model entries hold Hugging Face or Megatron-core weights:"
            f" {shown}; refusing to pick one (save one model per checkpoint)"
        )
    if not entries and any(_root(key.split(".")) in _KNOWN_ROOTS for key in names):
        entries = [""]
    roots = StateRoots(tuple(entries), None)
    held = [p[:-1] for p in roots._optimizer_prefixes if any(k.startswith(p) for k in names)]
    if len(held) > 1:
        raise AmbiguousStateError(
            f"optimizer entries {' and '.join(held)} both hold tensors beside the model"
            f" entry {roots.describe_models()}; refusing to pick one"
        )
    if not held:
        return StateRoots(roots.models, None)
    return StateRoots(roots.models, held[0], state_prefixes(held[0], names))


# Segments an optimizer may put between its entry and `state`: Megatron's
# Float16OptimizerWithFloat16Params keeps torch's state dict under `optimizer`, and its
# ChainedOptimizer one state dict per model chunk under `0`, `1`, ...
_NESTING_DEPTH = 3


def state_prefixes(optimizer: str, keys: Iterable[str]) -> tuple[str, ...]:
    """The prefixes per-parameter states lie under in `optimizer`'s keys, in first-seen
    order: `optimizer.state.` (torch, FSDP2, Megatron's distributed optimizer),
    `optimizer.optimizer.state.` (Megatron's fp16/bf16 optimizer without the distributed
    one), `optimizer.0.state.`, `optimizer.1.state.` (its ChainedOptimizer)."""
    entry = f"{optimizer}."
    found: dict[str, None] = {}
    for key in keys:
        if not key.startswith(entry):
            continue
        parts = key[len(entry) :].split(".", _NESTING_DEPTH + 1)
        for depth, part in enumerate(parts[:-1]):
            if part == "state":
                found.setdefault(entry + "".join(p + "." for p in parts[: depth + 1]))
                break
            if depth == _NESTING_DEPTH or not (part == "optimizer" or part.isdigit()):
                break
    return tuple(found)


def _entry_of_key(key: str) -> str | None:
    """The shortest prefix of `key` ending in a model segment with a known root after it."""
    parts = key.split(".")
    for index, part in enumerate(parts[:-1]):
        if part in OPTIMIZER_ENTRIES:
            return None
        if _MODEL_SEGMENT_RE.fullmatch(part) and _root(parts[index + 1 :]) in _KNOWN_ROOTS:
            return ".".join(parts[: index + 1])
    return None


def _root(parts: list[str]) -> str | None:
    """The first segment that is no wrapper's."""
    return next((part for part in parts if part not in WRAPPER_SEGMENTS), None)


def _outermost(found: dict[str, str]) -> list[str]:
    """The entries not nested in another one found (`app.model` over `app.model.model`):
    sorted by segments, an entry's descendants follow it directly."""
    kept: list[str] = []
    for entry in sorted(found, key=lambda e: e.split(".")):
        if not (kept and entry.startswith(kept[-1] + ".")):
            kept.append(entry)
    return kept
