"""Checks that a checkpoint's optimizer state is whole: every parameter the optimizer
stepped holds its optimizer's full set of states (recognised from the names: Adam's
moments, Adafactor's factors, ...), each shaped like its parameter.

States are paired with parameters by name across the layouts users have (FSDP2's
`optimizer.state.<param>.exp_avg`, Megatron's distributed optimizer under
`module.module.module.`, torch's positional `Optimizer.state_dict()`, the HF Trainer's
separate optimizer DCP); a parameter without state is an error only where the
checkpoint's own record says it was optimized, else a warning (frozen, never stepped).
`validate --deep` of a checkpoint without a manifest also finds the states no optimizer
writes out of range, in the one read of each tensor (`optimizer_value_check`): with a
manifest its digests catch any change.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mfsdp_ckpt.check.config_checks import config_to_check
from mfsdp_ckpt.check.optimizer_saved import SavedOptimizer, recorded_optimizer_save
from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.check.recorded_optimizer import (
    RecordedOptimizer,
    megatron_optimizer,
    settings_optimizer,
)
from mfsdp_ckpt.check.report import ERROR, WARNING, ValidationReport
from mfsdp_ckpt.check.storage_checks import (
    TensorCheck,
    check_backing,
    check_chunks,
    check_data_files,
    check_storage_entries,
)
from mfsdp_ckpt.convert import tied_head
from mfsdp_ckpt.format import layout, megatron_flat_optimizer, optimizer_states, state_keys
from mfsdp_ckpt.format.dcp_metadata import UnsafeMetadataError
from mfsdp_ckpt.format.finite import PIECE_ELEMENTS
from mfsdp_ckpt.format.hf_trainer import OPTIMIZER_ENTRY
from mfsdp_ckpt.format.manifest import Manifest
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import (
    CheckpointFormatError,
    CheckpointReader,
    TensorEntry,
)

if TYPE_CHECKING:
    import torch


class _TensorTables(Protocol):
    """What pairing optimizer states with parameters reads: a tensor table, one DCP's or
    the model's and optimizer's DCPs' together (`joint_tables`)."""

    @property
    def tensors(self) -> Mapping[str, TensorEntry]: ...


@dataclass(frozen=True)
class _JointTables:
    tensors: Mapping[str, TensorEntry]


def joint_tables(model: CheckpointReader, optimizer: CheckpointReader) -> _JointTables:
    """The model's tensors and the optimizer's (its `optimizer.` keys only: one that
    names a weight is reported by `check_optimizer_dcp`, never taken for it)."""
    states = {k: e for k, e in optimizer.tensors.items() if k.startswith(OPTIMIZER_ENTRY)}
    return _JointTables({**model.tensors, **states})


def check_optimizer_dcp(
    paths: layout.CheckpointPaths, report: ValidationReport
) -> CheckpointReader | None:
    """A layout's optimizer state in a DCP dir of its own (the HF Trainer's optimizer_0/),
    checked as any DCP is (metadata, shared bytes, data files, chunks, storage entries),
    its keys all under `optimizer.` (all Accelerate saves there). Returns its reader for
    the checks that pair its states with the model's parameters; None when there is no
    such dir or its metadata cannot be read."""
    directory = paths.optimizer_dcp
    if directory is None:
        return None
    metadata = directory / layout.DCP_METADATA_FILE
    try:
        reader = CheckpointReader(directory)
    except (UnsafeMetadataError, CheckpointFormatError, CheckpointFileError) as err:
        report.add_error(metadata, err)
        return None
    report.tensors += len(reader.tensors)
    report.tensor_bytes += sum(e.nbytes for e in reader.tensors.values())
    report.files += len(check_data_files(reader, report)) + 1
    for check in (check_chunks, check_storage_entries, check_backing):
        check(reader, report)
    stray = sorted(
        k for k in [*reader.tensors, *reader.objects] if not k.startswith(OPTIMIZER_ENTRY)
    )
    if stray:
        more = f" (+{len(stray) - 1} more)" if len(stray) > 1 else ""
        report.add(ERROR, f"{metadata} [{stray[0]}]", f"not optimizer state{more}")
    states = any(k.startswith(f"{OPTIMIZER_ENTRY}state.") for k in reader.tensors)
    report.has_optimizer_state = bool(report.has_optimizer_state) or states
    return reader


_GROUP_META_ENTRY = "param_to_group_meta"
_UNRECORDED = RecordedOptimizer(None, "which optimizer, and so which states, is not recorded")


@dataclass(frozen=True)
class _OptimizerRecord:
    """What the checkpoint says beside its states about which parameters were optimized:
    `tied`, whether its config (or Megatron record) ties the output layer to the embedding
    (None: nothing says); `every`, that all were (an mfsdp training step's manifest);
    `stems`, those Megatron's `param_to_group_meta` names, each with the key its states
    would be stored under less the state's name; `optimizer`, which optimizer the run's
    record names (read only when no state is left to tell); `recorded`, the same where the
    record itself names it, else what the stored param-group settings say, else None (read
    only to compare with the states found); `muon`, whether the stored param groups hold
    Muon's `ns_steps` (its momentum_buffer is then Muon's, not SGD's); `saved`, a record
    saying the optimizer state was saved with the step (verl's ckpt_contents.json,
    Megatron-LM's args: `optimizer_saved`), read only when no state is held and neither the
    manifest nor `param_to_group_meta` names the parameters; `flat`, Megatron's optimizer
    state in a form that is not per parameter (`megatron_flat_optimizer`), when the
    checkpoint holds it."""

    tied: bool | None = None
    every: bool = False
    stems: Mapping[str, str] = field(default_factory=dict)
    optimizer: Callable[[], RecordedOptimizer] = lambda: _UNRECORDED
    recorded: Callable[[], RecordedOptimizer | None] = lambda: None
    saved: Callable[[], SavedOptimizer | None] = lambda: None
    muon: bool = False
    flat: megatron_flat_optimizer.FlatOptimizerState | None = None

    def optimized(self, name: str) -> bool:
        """Whether the record names parameter `name` (a module path) as stepped, so that
        one without state lost it rather than being frozen."""
        return self.every or name in self.stems or state_keys.group_meta_name(name) in self.stems

    def stem(self, name: str) -> str | None:
        """The key parameter `name`'s states would be stored under less the state's name,
        from its `param_to_group_meta` record: under `name` itself, or under the unsplit,
        unrenamed name Megatron-LM records for a SwiGLU fc1 half or an MTP layer's weight
        (`state_keys.group_meta_name`), its tail then named as the states name it; None
        where no record tells."""
        if name in self.stems:
            return self.stems[name]
        recorded = state_keys.group_meta_name(name)
        stem = self.stems.get(recorded)
        if stem is None or not stem.endswith(recorded):
            return None
        return stem[: len(stem) - len(recorded)] + name

    @property
    def names_them(self) -> str:
        """How a message says which record names the parameters as optimized."""
        if self.every:
            return "the manifest records as optimized, as it lists 'optimizer'"
        return f"{_GROUP_META_ENTRY} names as optimized"


def optimizer_record(
    paths: layout.CheckpointPaths,
    reader: CheckpointReader,
    roots: state_keys.StateRoots,
    manifest: Manifest | None,
    hf_config: str | os.PathLike | None,
) -> _OptimizerRecord:
    """What the checkpoint records beside its optimizer states (`_OptimizerRecord`): every
    parameter of an mfsdp training step that saved its optimizer (the trainer optimizes
    them all; a LoRA step holds adapters; a step without any optimizer entry is reported by
    the contents check), and those Megatron's optimizer lists in `param_to_group_meta`
    (built from the trainable parameters, whose gradients live in its grad buffer, so each
    one is stepped)."""
    tied = _says_tied(paths, reader, hf_config)
    keys = [*reader.objects, *reader.tensors]
    if (
        manifest is not None
        and manifest.lora is None
        and "optimizer" in manifest.contents
        and any(map(roots.under_optimizer, keys))
    ):
        return _OptimizerRecord(tied, every=True)
    stems = _group_meta_stems(keys, roots)
    flat = _flat_state(keys)
    settings = [key for key in keys if roots.under_optimizer(key)]
    muon = any(key.endswith(_MUON_SETTING) for key in settings)

    @functools.cache
    def recorded() -> RecordedOptimizer | None:
        return _run_optimizer(paths, reader) or settings_optimizer(settings)

    if not stems:
        return _OptimizerRecord(
            tied,
            optimizer=lambda: megatron_optimizer(paths, reader),
            recorded=recorded,
            muon=muon,
            saved=functools.partial(recorded_optimizer_save, paths, reader),
            flat=flat,
        )
    return _OptimizerRecord(
        tied,
        stems=stems,
        optimizer=lambda: megatron_optimizer(paths, reader),
        recorded=recorded,
        muon=muon,
        flat=flat,
    )


_MUON_SETTING = ".ns_steps"  # torch.optim.Muon's Newton-Schulz steps, in each param group


def _run_optimizer(
    paths: layout.CheckpointPaths, reader: CheckpointReader
) -> RecordedOptimizer | None:
    """The optimizer the run's own record names itself: Megatron-LM's args `optimizer`,
    Megatron-Bridge's run_config.yaml `optimizer:` section's. None where the record leaves
    it out (Megatron's default then is a guess: a hand-made record, a stand-in), there is
    no record, or it cannot be read (the config checks report that)."""
    from mfsdp_ckpt.convert.megatron_record import ARGS_KEY, read_args, run_config_data

    try:
        if paths.run_config is not None:
            settings = run_config_data(paths.run_config, paths.root).get("optimizer")
        else:
            settings = read_args(reader) if ARGS_KEY in reader.objects else None
    except (CheckpointFormatError, CheckpointFileError):
        return None
    if not isinstance(settings, dict) or "optimizer" not in settings:
        return None
    return megatron_optimizer(paths, reader)


def _says_tied(
    paths: layout.CheckpointPaths, reader: CheckpointReader, hf_config: str | os.PathLike | None
) -> bool | None:
    """tie_word_embeddings of the config the weights are checked against (or of the one
    Megatron's record implies); None when there is none, or it cannot be read (the config
    checks report that)."""
    from mfsdp_ckpt.convert.hf_config import expected_weights_for
    from mfsdp_ckpt.convert.megatron_record import recorded_config
    from mfsdp_ckpt.errors import MfsdpError

    config_file = config_to_check(paths, hf_config)
    try:
        if config_file is not None:
            root: str | Path = paths.root
            if hf_config is not None:
                root = safe_files.model_dir_root(config_file.parent)
            safe_files.regular_file(config_file, root, str(root))
            return expected_weights_for(config_file, root=root).tie_word_embeddings
        derived = recorded_config(paths, reader)
    except MfsdpError:
        return None
    return None if derived is None else derived.config["tie_word_embeddings"] is True


# Megatron's distributed optimizer records each parameter's group settings beside its
# states: `optimizer.param_to_group_meta.<param>.<lr|betas|...>` next to `optimizer.state.`
_GROUP_META = f".{_GROUP_META_ENTRY}."


def _group_meta_stems(keys: list[str], roots: state_keys.StateRoots) -> dict[str, str]:
    """The parameters (module paths) Megatron's `param_to_group_meta` names, each with the
    key its states would be stored under less the state's name (`optimizer.state.
    module.module.module.<param>`): found whether or not any state is left, under the
    optimizer entry and any nesting in it (a ChainedOptimizer's `optimizer.0.`)."""
    stems: dict[str, str] = {}
    for key in keys:
        at = key.find(_GROUP_META)
        if at < 0 or not roots.under_optimizer(key):
            continue
        path = key[at + len(_GROUP_META) :].rpartition(".")[0]
        stems.setdefault(state_keys.hf_name(path), f"{key[: at + 1]}state.{path}")
    return stems


def check_optimizer(
    reader: _TensorTables,
    roots: state_keys.StateRoots,
    report: ValidationReport,
    record: _OptimizerRecord | None = None,
) -> None:
    """The optimizer's per-parameter tensors must be complete for every parameter it
    stepped and match its shape. Which tensors those are depends on the optimizer: its
    set is recognised from each parameter's names (`optimizer_states.identify_each`:
    Adam's moments, Adafactor's factored statistics, Adagrad's sum, a chain such as Muon's
    momentum_buffer beside Adam's); a set no optimizer here keeps is a warning, its
    completeness not checked, its per-element states still held to their parameter's shape.

    States are matched to parameters by name with entries and wrapper segments removed,
    which covers FSDP2's `optimizer.state.<param>.exp_avg`, torch's DCP recipe's
    `app.optim.state.<param>.exp_avg` beside `app.model.<param>`, and Megatron's
    distributed optimizer, `optimizer.state.module.module.module.<param>.exp_avg` (SwiGLU
    fc1 split into weight_w/weight_v as in the model). A missing state is named by the key
    it would be stored under; a stepped parameter holding none, by each set it may have lost
    where nothing tells which (`optimizer_states.lost_sets`). A parameter with no state at
    all was frozen or never stepped (a warning), unless `record` names it as optimized (an
    error); a tied output layer, optimized under the embedding's name, needs none. No
    state for any parameter, while `record` names them, is one error (`_report_no_state`).
    A state that matches no parameter is a warning (an optimizer may legitimately hold
    more than the model state shows), unless it is a per-element state of a weight the
    model lost (`_report_lost_weights`). Which optimizer's states they are goes into the
    report (`optimizer_kind`); states lacking one the run's own record keeps (Megatron's
    args name Adam, the states are SGD's) are an error naming both (`_check_recorded`).
    """
    record = record or _OptimizerRecord()
    tensors = reader.tensors
    pairs = _pair_states(tensors, roots)
    params, found, unmatched = pairs.params, pairs.found, pairs.unmatched
    held = pairs.held
    if not held:
        if record.flat is not None:
            _report_flat_state(record.flat, report)
            return
        _report_no_state(params, tensors, record, report)
        return
    kind = _recognised(pairs, tensors, lambda: _record_says_muon(record))
    report.optimizer_kind = optimizer_states.held_states(held, kind)
    contradicted = _check_recorded(kind, held, pairs.first_key, record, report)
    if pairs.positional:
        _check_positional_states(kind, tensors, params, pairs.by_position, report)
        return
    if kind is None:
        _check_shapes(optimizer_states.PER_ELEMENT, tensors, params, found, report)
        if not contradicted:
            _report_unknown_states(pairs.first_key, held, report)
    else:
        stateless = _check_states(kind, tensors, params, found, report, record)
        tie = {name: _tied_head(name, params, tensors, record.tied) for name in stateless}
        lost = [name for name in stateless if record.optimized(name) and tie[name] is False]
        untold = {name for name, tied in tie.items() if tied is None}
        told = _StatelessTold(
            tensors,
            muon_lost=optimizer_states.MUON in kind.name.split(" + ")
            and "momentum_buffer" not in held,
            recorded=_names_optimizer(record),
        )
        _report_stateless(kind, stateless, lost, untold, roots, params, found, report, told)
    unmatched = _report_lost_weights(unmatched, roots, params, report)
    if unmatched:
        more = f" (+{len(unmatched) - 1} more)" if len(unmatched) > 1 else ""
        first = next(iter(unmatched))
        report.add(WARNING, f"[{first}]", f"optimizer state matches no model parameter{more}")


def _recognised(
    pairs: _StatePairs, tensors: Mapping[str, TensorEntry], says_muon: Callable[[], bool]
) -> optimizer_states.OptimizerStates | None:
    """The optimizer (or chain) the states are, recognised from each parameter's set
    (`optimizer_states.identify_each`), SGD's momentum_buffer named Muon's, or Muon chained
    to the rest where no momentum is left, when `says_muon` (the stored param groups or the
    run's record), and either's where nothing says which but its layout is Muon's
    (`_momentum_on_matrices`)."""
    if pairs.positional:
        kind = optimizer_states.identify(pairs.held)
    else:
        kind = optimizer_states.identify_each(pairs.found.values() or [pairs.held])
    members = [] if kind is None else kind.name.split(" + ")
    if kind is not None and says_muon():
        return optimizer_states.with_muon(kind)
    if kind is None or "SGD" not in members:
        return kind
    if len(members) > 1 and _momentum_on_matrices(pairs, tensors):
        return optimizer_states.named_momentum(kind, optimizer_states.SGD_OR_MUON)
    return kind


def _momentum_on_matrices(pairs: _StatePairs, tensors: Mapping[str, TensorEntry]) -> bool:
    """Whether every parameter holding SGD's set (momentum_buffer) is a matrix (or a stack
    of them), as Muon steps only those; positional states tie none to its parameter."""
    momentum = [
        name for name, states in pairs.found.items() if optimizer_states.identify(states) == _SGD
    ]
    return bool(momentum) and all(len(tensors[pairs.params[n]].shape) >= 2 for n in momentum)


_SGD = next(kind for kind in optimizer_states.KNOWN_OPTIMIZERS if kind.name == "SGD")


def _record_says_muon(record: _OptimizerRecord) -> bool:
    """Whether the stored param groups (`ns_steps`) or the run's record name Muon."""
    recorded = record.recorded()
    return record.muon or (recorded is not None and recorded.muon)


def _report_lost_weights(
    unmatched: dict[str, str],
    roots: state_keys.StateRoots,
    params: dict[str, str],
    report: ValidationReport,
) -> dict[str, str]:
    """A per-element state (exp_avg, momentum_buffer, ...) for a parameter the model does
    not hold, in a module whose other parameters it does hold: the optimizer stepped a
    weight the model entry lost (an error per such parameter, naming it). Returns the
    unmatched states left, a warning only: an optimizer may hold state the model state
    does not show."""
    modules = {_parent_module(name) for name in params}
    named = {
        key: state_keys.hf_name((roots.state_path(key) or "").rpartition(".")[0])
        for key in unmatched
    }
    lost: dict[str, str] = {}
    for key, state in unmatched.items():
        parent = _parent_module(named[key])
        if state in optimizer_states.PER_ELEMENT and parent and parent in modules:
            lost.setdefault(named[key], key)
    left = {key: state for key, state in unmatched.items() if named[key] not in lost}
    for name, key in lost.items():
        report.add(
            ERROR,
            f"[{key}]",
            f"optimizer state for parameter {name}, which the model does not hold: the"
            " optimizer stepped it, so the weight was lost",
        )
    return left


def _parent_module(name: str) -> str:
    """`model.layers.1.mlp.down_proj.weight` -> `model.layers.1.mlp`: the module holding
    the parameter's own module, whose other parameters tell the model holds it."""
    return name.rpartition(".")[0].rpartition(".")[0]


@dataclass(frozen=True)
class _StatePairs:
    """A checkpoint's per-parameter optimizer states by the parameter they belong to:
    `params`, module path -> weight key; `found`, module path -> state name -> key;
    `by_position`, the same keyed by position (torch's own `Optimizer.state_dict()`);
    `unmatched`, key -> state name of those that name no parameter."""

    params: dict[str, str]
    found: dict[str, dict[str, str]]
    by_position: dict[str, dict[str, str]]
    unmatched: dict[str, str]

    @property
    def positional(self) -> bool:
        """States keyed by position only: their pairing with parameters is not recorded."""
        return bool(self.by_position) and not self.found

    @property
    def _keyed(self) -> dict[str, str]:
        """key -> state name of the states the optimizer is recognised by: those paired
        with a parameter (by name, else by position), else those that name none."""
        paired = self.by_position if self.positional else self.found
        keyed = {key: name for states in paired.values() for name, key in states.items()}
        return keyed or self.unmatched

    @property
    def held(self) -> set[str]:
        """The state names the optimizer is recognised by (empty: no state at all)."""
        return set(self._keyed.values())

    @property
    def first_key(self) -> str:
        """The first state key of those: what a finding about them all names."""
        if self.positional:
            return next(iter(self.by_position[min(self.by_position, key=int)].values()))
        return next(iter(self._keyed))


def _pair_states(tensors: Mapping[str, TensorEntry], roots: state_keys.StateRoots) -> _StatePairs:
    """Each per-parameter state tensor paired with its parameter by name (entries and
    wrapper segments removed), or by position, or with none."""
    params = {roots.module_path(key): key for key in roots.weight_keys(tensors)}
    pairs = _StatePairs(params, {}, {}, {})
    for key in tensors:
        rest = roots.state_path(key)
        if rest is None:
            continue
        path, _, state_name = rest.rpartition(".")
        name = state_keys.hf_name(path)
        if name in params:
            pairs.found.setdefault(name, {})[state_name] = key
        elif path.isdigit():
            pairs.by_position.setdefault(path, {})[state_name] = key
        else:
            pairs.unmatched[key] = state_name
    return pairs


def optimizer_kind(
    tensors: Mapping[str, TensorEntry],
    roots: state_keys.StateRoots,
    settings: Collection[str] = (),
) -> optimizer_states.HeldStates | None:
    """Which optimizer's state the checkpoint holds, as validate recognises it (inspect
    says the same; `settings`, the keys of its stored non-tensor values, tell Muon's
    param groups and a dp_zero_gather_scatter object); Megatron's flat-form state named as
    validate names it where no per-parameter state is held (`flat_state_alone`); None when
    it holds none."""
    pairs = _pair_states(tensors, roots)
    if not pairs.held:
        flat = flat_state_alone(tensors, roots, settings)
        return None if flat is None else flat_state_kind(flat)
    muon = any(k.endswith(_MUON_SETTING) and roots.under_optimizer(k) for k in settings)
    return optimizer_states.held_states(pairs.held, _recognised(pairs, tensors, lambda: muon))


def _check_recorded(
    kind: optimizer_states.OptimizerStates | None,
    held: set[str],
    first: str,
    record: _OptimizerRecord,
    report: ValidationReport,
) -> bool:
    """Hold the states present to the optimizer the run's own record names (Megatron-LM's
    args `optimizer`, Bridge's run_config.yaml `optimizer:` section), where its states are
    known here: one error when no parameter holds a state it keeps (args `optimizer='adam'`
    beside SGD's momentum_buffer, or Adam's moments without any exp_avg_sq), since a resume
    with that setting fails to load them; per-parameter gaps are `_check_states`' findings.
    SGD without momentum keeps none, so states beside it are a warning only: the resume
    reads nothing from them. Returns whether the error was reported (the states then need
    no further word as an unknown set)."""
    recorded = record.recorded()
    if recorded is None or not recorded.binds(held):
        return False
    if recorded.states is not None:
        lacking = recorded.states.missing(held)
        if not lacking:
            return False
        keeps = ", ".join(recorded.states.missing(()))
        report.add(
            ERROR,
            f"[{first}]",
            f"optimizer state is {optimizer_states.held_states(held)}, not what"
            f" {recorded.about} keeps ({recorded.states.name}'s {keeps}): no parameter holds"
            f" {', '.join(lacking)}; a resume with that setting cannot load these states",
        )
        return True
    if kind is not None and not recorded.keeps_state:
        report.add(
            WARNING,
            f"[{first}]",
            f"optimizer state is {kind.name}'s, but the run's record names an optimizer that"
            f" keeps none ({recorded.about}); a resume with that setting does not use these"
            " states",
        )
    return False


# Adam's second moment and AMSGrad's running maximum of it: means of squared gradients,
# which no optimizer (torch's, Megatron's distributed one, apex's, transformers') stores
# below 0; NaN and Inf in any state are `storage_checks.check_values`' findings.
SQUARED_MEANS = frozenset({"exp_avg_sq", "max_exp_avg_sq"})
STEP_COUNT = "step"  # torch's and Megatron's per-parameter count of steps taken


def optimizer_value_check(roots: state_keys.StateRoots) -> TensorCheck:
    """What validate --deep of a checkpoint without a manifest, whose bytes no digest
    vouches for, also looks for in each tensor `check_values` reads (so the states are read
    once, not again here): an error naming each optimizer state key that holds what no
    optimizer writes, a negative second moment or a step count below 0 or between whole
    numbers (an edited or corrupted state a resume would load without a word: Adam's update
    divides by the moment's square root). A tensor that cannot be read is `check_values`'
    finding."""

    def problem(key: str, values: Iterator[torch.Tensor]) -> str | None:
        rest = roots.state_path(key)
        state = rest.rpartition(".")[2] if rest is not None else None
        if state == STEP_COUNT:
            return _step_problem(_pieces(values))
        if state in SQUARED_MEANS:
            return _negative_problem(_pieces(values))
        return None

    return problem


def _pieces(values: Iterator[torch.Tensor]) -> Iterator[torch.Tensor]:
    """`values` (the flat pieces `check_values` reads) as pieces of at most
    `PIECE_ELEMENTS` (widened to float where the dtype compares only so), so that a
    widened copy takes a piece's memory, not a tensor's."""
    import torch

    for part in values:
        for piece in part.detach().reshape(-1).split(PIECE_ELEMENTS):
            wide = piece.is_floating_point() and piece.dtype != torch.float64
            yield piece.float() if wide else piece


def _negative_problem(pieces: Iterator[torch.Tensor]) -> str | None:
    negative = sum(int((piece < 0).sum()) for piece in pieces)
    if not negative:
        return None
    values = "values" if negative > 1 else "value"
    reason = "a mean of squared gradients, which no optimizer stores below 0"
    return f"{negative} negative {values} ({reason})"


def _step_problem(pieces: Iterator[torch.Tensor]) -> str | None:
    """The first step count below 0 or not whole; NaN and Inf are left to `check_values`."""
    for piece in pieces:
        if not piece.is_floating_point():
            wrong = piece[piece < 0]
        else:
            finite = piece[piece.isfinite()]
            wrong = finite[(finite < 0) | (finite != finite.floor())]
        if wrong.numel():
            value = wrong[0].item()
            shown = int(value) if value == int(value) else value
            return f"step count {shown} (an optimizer counts whole steps from 0)"
    return None


def _report_flat_state(
    flat: megatron_flat_optimizer.FlatOptimizerState, report: ValidationReport
) -> None:
    """Megatron's optimizer state held in a flat form (dp_reshardable buffers, a
    dp_zero_gather_scatter object): present, so the report says so and which optimizer's
    it is where its buffers' names tell; one warning that it is not per parameter, so
    nothing here checks it against the parameters (which element is whose lies in the
    run's grad-buffer layout, not in the checkpoint)."""
    report.has_optimizer_state = True
    report.optimizer_kind = flat_state_kind(flat)
    report.add(
        WARNING,
        f"[{flat.first}]",
        f"{flat.describe()}: which parameter each element belongs to is not in the"
        " checkpoint, so it is not checked against the parameters; Megatron-LM's inspector"
        f" leaves it unconverted ({megatron_flat_optimizer.RESAVE})",
    )


def flat_state_kind(
    flat: megatron_flat_optimizer.FlatOptimizerState,
) -> optimizer_states.HeldStates:
    """Which optimizer's state a flat form holds, as validate's verdict and inspect name it:
    `Adam (Megatron dp_reshardable, not per parameter)` where its buffers' names tell the
    optimizer, `(Megatron dp_zero_gather_scatter, not per parameter)` where they are
    pickled in one object."""
    kind = optimizer_states.identify(flat.states) if flat.states else None
    form = f"Megatron {flat.form}, not per parameter"
    name = f"{kind.name} ({form})" if kind is not None else f"({form})"
    return optimizer_states.HeldStates(name, flat.states)


def flat_state_alone(
    tensors: Mapping[str, TensorEntry], roots: state_keys.StateRoots, objects: Collection[str]
) -> megatron_flat_optimizer.FlatOptimizerState | None:
    """Megatron's optimizer state in a flat form among the checkpoint's tensors and
    non-tensor entries (`objects`), where it holds no per-parameter state: the state
    `check_optimizer` reports then (`_report_flat_state`), so that inspect, told the same
    keys, says what validate says; None otherwise."""
    if _pair_states(tensors, roots).held:
        return None
    return _flat_state([*tensors, *objects])


def _flat_state(keys: Collection[str]) -> megatron_flat_optimizer.FlatOptimizerState | None:
    """`megatron_flat_optimizer.flat_optimizer_state` of `keys` taken in sorted order, so
    that its first key is the same whichever order a reader lists them in (validate reads
    the non-tensor entries first, inspect the tensors)."""
    return megatron_flat_optimizer.flat_optimizer_state(sorted(keys))


def _report_no_state(
    params: dict[str, str],
    tensors: Mapping[str, TensorEntry],
    record: _OptimizerRecord,
    report: ValidationReport,
) -> None:
    """No per-parameter state at all, while the record names parameters as optimized: the
    state was lost whole (Megatron-LM's fsdp_dtensor load allows a partial load, so a resume
    restarts the optimizer silently). No state is left to tell the optimizer by, so its
    states are those of the optimizer the run's record names (`recorded_optimizer`); one
    error naming the first key they would be stored under and how many parameters lack
    them, or only the count when the optimizer's states are not known here."""
    saved = None if record.every or record.stems else record.saved()
    lost = [
        name
        for name in params
        if (saved is not None or record.optimized(name))
        and _tied_head(name, params, tensors, record.tied) is False
    ]
    if not lost:
        return
    recorded = record.optimizer()
    if not recorded.keeps_state:
        return
    first = f"[{params[lost[0]]}]"
    names_them = record.names_them if saved is None else saved.names_them
    lacking = f"no optimizer state for the {len(lost)} parameters {names_them}"
    stem = record.stem(lost[0])
    if recorded.states is None or stem is None:
        severity = ERROR if saved is None else saved.severity
        named = first_of([f"[{params[name]}]" for name in lost], _SHOWN_STATELESS)
        report.add(severity, first, f"{lacking}: {named}; {recorded.about}")
        return
    missing = recorded.states.missing(())
    expected = f"{stem}.{missing[0]}"
    report.add(
        ERROR,
        first,
        f"{lacking}: each lacks {recorded.states.name}'s {' and '.join(missing)}"
        f" (first: no [{expected}]; {recorded.about})",
    )


def _check_states(
    kind: optimizer_states.OptimizerStates,
    tensors: Mapping[str, TensorEntry],
    params: dict[str, str],
    found: dict[str, dict[str, str]],
    report: ValidationReport,
    record: _OptimizerRecord,
) -> list[str]:
    """Each parameter holding states holds `kind`'s whole set, each shaped like it (an
    error per state lost or misshapen); returns the parameters holding none."""
    stateless = []
    for name, key in params.items():
        states = found.get(name, {})
        if not states:
            if _tied_head(name, params, tensors, record.tied) is not True:
                stateless.append(name)
            continue
        for state in kind.missing(states):
            expected = f"{next(iter(states.values())).rpartition('.')[0]}.{state}"
            report.add(ERROR, f"[{key}]", f"optimizer state {state} is missing (no [{expected}])")
        _check_shape(kind.like_parameter, tensors, key, states, report)
    return stateless


def _check_shapes(
    like_parameter: frozenset[str],
    tensors: Mapping[str, TensorEntry],
    params: dict[str, str],
    found: dict[str, dict[str, str]],
    report: ValidationReport,
) -> None:
    """Each state named in `like_parameter` is shaped like its parameter (an error per
    misshapen one): checked whether or not the optimizer's set is known."""
    for name, states in found.items():
        _check_shape(like_parameter, tensors, params[name], states, report)


def _check_shape(
    like_parameter: frozenset[str],
    tensors: Mapping[str, TensorEntry],
    key: str,
    states: dict[str, str],
    report: ValidationReport,
) -> None:
    """Parameter `key`'s `states` named in `like_parameter` are shaped like it."""
    for state, state_key in states.items():
        if state in like_parameter and tensors[state_key].shape != tensors[key].shape:
            report.add(
                ERROR,
                f"[{state_key}]",
                f"shape {tensors[state_key].shape} differs from the parameter's"
                f" {tensors[key].shape}",
            )


def _names_optimizer(record: _OptimizerRecord) -> bool:
    """Whether anything beside the states names the optimizer: an mfsdp training step's
    manifest (its trainer steps AdamW alone), Muon's stored settings, or the run's own
    record. Adam's stored betas and eps do not: AdamW chained with Muon stores them too."""
    if record.every or record.muon:
        return True
    recorded = record.recorded()
    return recorded is not None and not recorded.settings_only


@dataclass(frozen=True)
class _StatelessTold:
    """What tells the states a stepped parameter without any lost (`lost_sets`): its
    parameter's shape (`tensors`), whether Muon's were lost everywhere (`muon_lost`), and
    whether a record names the optimizer (`recorded`)."""

    tensors: Mapping[str, TensorEntry]
    muon_lost: bool
    recorded: bool

    def sets(
        self, kind: optimizer_states.OptimizerStates, key: str
    ) -> tuple[optimizer_states.OptimizerStates, ...]:
        """The sets parameter `key` may have lost."""
        matrix = len(self.tensors[key].shape) >= 2
        return optimizer_states.lost_sets(kind, matrix, self.muon_lost, self.recorded)


def _report_lost(
    kind: optimizer_states.OptimizerStates,
    key: str,
    expected: Callable[[str], str],
    told: _StatelessTold,
    report: ValidationReport,
) -> None:
    """Parameter `key`, stepped, holds no state: an error per state it lacks where one
    optimizer's set is told (`_StatelessTold`), else one error naming each set it may have
    lost, whose is not told."""
    sets = told.sets(kind, key)
    if len(sets) == 1:
        for state in sets[0].missing(()):
            report.add(
                ERROR, f"[{key}]", f"optimizer state {state} is missing (no [{expected(state)}])"
            )
        return
    either = ", or ".join(f"{member.name}'s {' and '.join(member.missing(()))}" for member in sets)
    keys = ", ".join(f"[{expected(member.missing(())[0])}]" for member in sets)
    report.add(
        ERROR,
        f"[{key}]",
        f"optimizer state is missing: it lacks either {either}; nothing tells which optimizer"
        f" stepped it (no {keys})",
    )


def _report_stateless(
    kind: optimizer_states.OptimizerStates,
    stateless: list[str],
    lost: list[str],
    untold: set[str],
    roots: state_keys.StateRoots,
    params: dict[str, str],
    found: dict[str, dict[str, str]],
    report: ValidationReport,
    told: _StatelessTold,
) -> None:
    """Parameters without any state: those in `lost` (a record names them as optimized)
    lost their states, each named by the key it would have (`_report_lost`); the others were
    frozen (requires_grad off), never got a gradient, or are an output layer no config
    says is tied, which a checkpoint cannot tell from a loss: one warning naming them. Where
    they are all such output layers (`untold`: FSDP2's get_model_state_dict saves a tied
    head under its own name, optimized once under the embedding's), the warning says the
    tie first, and what tells it."""
    lead = _optimizer_lead(roots, params, found)
    for name in lost:
        expected = functools.partial(_state_key, roots, params[name], {}, lead=lead)
        _report_lost(kind, params[name], expected, told, report)
    errors = set(lost)
    rest = [params[name] for name in stateless if name not in errors]
    if not rest:
        return
    why = "frozen, or never stepped"
    if all(name in untold for name in stateless if name not in errors):
        why = (
            "tied to the embedding, optimized under the embedding's name (--hf-config with"
            f" tie_word_embeddings true says so), or {why}"
        )
    others = first_of([f"[{key}]" for key in rest[1:]], _SHOWN_STATELESS - 1)
    listed = f"; also {others}" if others else ""
    report.add(
        WARNING,
        f"[{rest[0]}]",
        f"no optimizer state, while {len(found)} of the {len(found) + len(stateless)}"
        f" parameters hold {kind.name}'s: {why}, so not checked{listed}",
    )


_SHOWN_STATELESS = 3  # keys a warning about parameters without state names


_SHOWN_STATE_NAMES = 8


def _report_unknown_states(first: str, held: set[str], report: ValidationReport) -> None:
    """States of an optimizer this check does not know (bitsandbytes' 8-bit state1/qmap1,
    a custom one): whether a parameter lacks one cannot be told, so nothing is judged."""
    shown = first_of(sorted(held), _SHOWN_STATE_NAMES)
    report.add(
        WARNING,
        f"[{first}]",
        f"optimizer states {shown} are no known optimizer's set"
        f" ({optimizer_states.known_names()}): their completeness is not checked",
    )


def _check_positional_states(
    kind: optimizer_states.OptimizerStates | None,
    tensors: Mapping[str, TensorEntry],
    params: dict[str, str],
    states: dict[str, dict[str, str]],
    report: ValidationReport,
) -> None:
    """torch's own `Optimizer.state_dict()` (what Megatron-LM's torch_dcp format and plain
    `dcp.save({"optim": opt.state_dict()})` save) keys each state by the parameter's
    position in its param groups, which the checkpoint does not tie to a name (Megatron
    orders them by weight-decay group). What can be checked is checked: each parameter
    holds its optimizer's whole set of states, each shaped like some parameter, and no
    more positions than parameters; `kind`, the optimizer recognised from the states
    (None: unknown)."""
    held = {name for names in states.values() for name in names}
    first = next(iter(states[min(states, key=int)].values()))
    if kind is None:
        _report_unknown_states(first, held, report)
    else:
        shapes = {tensors[key].shape for key in params.values()}
        for position in sorted(states, key=int):
            _check_position(kind, tensors, shapes, states[position], report)
    if len(states) > len(params):
        report.add(
            ERROR,
            f"[{next(iter(states[max(states, key=int)].values()))}]",
            f"{len(states)} parameters' optimizer states for the model's {len(params)}",
        )
    report.add(
        WARNING,
        f"[{first}]",
        f"optimizer state of {len(states)} parameters keyed by position (torch's"
        " Optimizer.state_dict()), not by name: each is shaped like a parameter, but which"
        " parameter it belongs to is not recorded, so the pairing is not checked",
    )


def _check_position(
    kind: optimizer_states.OptimizerStates,
    tensors: Mapping[str, TensorEntry],
    shapes: set[tuple[int, ...]],
    names: dict[str, str],
    report: ValidationReport,
) -> None:
    """One positional parameter's states: `kind`'s whole set, each shaped like some
    parameter (which one is not recorded)."""
    some = next(iter(names.values()))
    for state in kind.missing(names):
        expected = f"{some.rpartition('.')[0]}.{state}"
        report.add(ERROR, f"[{some}]", f"optimizer state {state} is missing ([{expected}])")
    for state, key in names.items():
        if state in kind.like_parameter and tensors[key].shape not in shapes:
            report.add(ERROR, f"[{key}]", f"shape {tensors[key].shape} is no model parameter's")


def _optimizer_lead(
    roots: state_keys.StateRoots, params: dict[str, str], found: dict[str, dict[str, str]]
) -> str:
    """What the optimizer's names put before a parameter's path in place of the model's
    leading wrapper segments (Megatron's distributed optimizer: `module.module.module.`
    where the model has `module.`), learnt from a parameter whose state is there; "" when
    none tells."""
    prefix = roots.optimizer_state or ""
    for name, states in found.items():
        state_path = next(iter(states.values()))[len(prefix) :].rpartition(".")[0]
        core = _unwrapped(roots.path_in_entry(params[name]))
        if state_path.endswith(core):
            return state_path[: len(state_path) - len(core)]
    return ""


def _state_key(
    roots: state_keys.StateRoots, param: str, states: dict[str, str], moment: str, lead: str
) -> str:
    """The key `moment` of parameter `param` would be stored under: beside the parameter's
    other states, else its path under the optimizer's state as the others are named."""
    if states:
        return f"{next(iter(states.values())).rpartition('.')[0]}.{moment}"
    return f"{roots.optimizer_state}{lead}{_unwrapped(roots.path_in_entry(param))}.{moment}"


def _unwrapped(path: str) -> str:
    """`module.decoder.layers.0.x` -> `decoder.layers.0.x`: leading wrapper segments off."""
    parts = path.split(".")
    while len(parts) > 1 and parts[0] in state_keys.WRAPPER_SEGMENTS:
        parts.pop(0)
    return ".".join(parts)


def _tied_head(
    name: str, params: dict[str, str], tensors: Mapping[str, TensorEntry], tied: bool | None
) -> bool | None:
    """Whether `name` is a tied output layer's second name: saved twice in the model state
    but optimized once, under the embedding's, so it needs no state of its own. True when
    the config (or Megatron's record) ties them, or the checkpoint stores it as the
    embedding's own bytes (import-hf's alias); False for an untied one or any other
    parameter; None for an output layer beside an embedding that nothing says is tied."""
    for out, inp in state_keys.TIED_PAIRS:  # saved twice, optimized once
        if not name.endswith(out):
            continue
        embedding = next((key for path, key in params.items() if path.endswith(inp)), None)
        if embedding is None:
            return False
        if tied is True or tied_head.stored_once(tensors[params[name]], tensors[embedding]):
            return True
        return None if tied is None else False
    return False
