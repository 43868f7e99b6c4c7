"""Which per-parameter states the optimizer a Megatron run records keeps.

The states a checkpoint holds are held to them (a resume with the recorded optimizer
loads exactly those), and when its optimizer state is gone whole, no state name is left to
recognise its optimizer from (`optimizer_states.identify`), while Megatron's
`param_to_group_meta` still names every parameter the optimizer stepped: which states
those parameters lack then comes from the same record. It is the run's own record of its
optimizer: Megatron-Bridge's run_config.yaml `optimizer:` section, else Megatron-LM's `args`
(`optimizer`, `sgd_momentum`), with Megatron's defaults (`adam`, momentum 0.9) for what the
record leaves out. Both are read as data only (safe
YAML, the restricted unpickler), bounded. An optimizer named but not known here is reported
as such: its states are never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.convert.megatron_record import ARGS_KEY, read_args, run_config_data
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.optimizer_states import KNOWN_OPTIMIZERS, OptimizerStates
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointReader

# Megatron's OptimizerConfig / Megatron-LM's --optimizer and --sgd-momentum defaults
DEFAULT_OPTIMIZER = "adam"
DEFAULT_SGD_MOMENTUM = 0.9
_BY_NAME = {kind.name: kind for kind in KNOWN_OPTIMIZERS}
_STATES = {"adam": _BY_NAME["Adam"], "sgd": _BY_NAME["SGD"]}  # Megatron's name -> states
# Megatron-LM's --optimizer muon|dist_muon chains Muon (the linear weights'
# momentum_buffer, as SGD's is named) with Adam on the rest (muon.py): which parameter
# holds which is not recorded, so a lost state is not named from it, only Muon's name
_MUON = frozenset({"muon", "dist_muon"})
# torch's Adam family stores these in each param group (Adamax also does, but keeps
# exp_inf, a name outside Adam's set: `RecordedOptimizer.settings_only` then binds nothing)
_ADAM_SETTINGS = ("betas", "eps")


@dataclass(frozen=True)
class RecordedOptimizer:
    """The optimizer a record names: `states`, the set each parameter it stepped holds
    (None: not known here); `keeps_state` False for one that keeps none (SGD without
    momentum); `about`, in words, which optimizer and from where, for a message;
    `settings_only`, read from stored param-group settings, not a run's record (`binds`);
    `muon`, a Muon run, whose momentum_buffer is Muon's, not SGD's."""

    states: OptimizerStates | None
    about: str
    keeps_state: bool = True
    settings_only: bool = False
    muon: bool = False

    def binds(self, held: set[str]) -> bool:
        """Whether states `held` are held to this record: always for a run's record; for
        one read from stored param-group settings only when every name held is its
        optimizer's (those settings are shared by optimizers keeping other states)."""
        return not self.settings_only or (self.states is not None and held <= self.states.names)


def settings_optimizer(keys: list[str]) -> RecordedOptimizer | None:
    """The optimizer family the checkpoint's own stored param-group settings say, where no
    run record names one (FSDP2, torchtitan and verl saves): Adam's betas and eps
    (`optimizer.param_groups.<i>.betas`, or Megatron's `param_to_group_meta.<param>.betas`)
    say Adam; None where they say nothing."""
    said = {
        key.rpartition(".")[2] for key in keys if ".param_groups." in key or "group_meta" in key
    }
    if not all(name in said for name in _ADAM_SETTINGS):
        return None
    return RecordedOptimizer(
        _BY_NAME["Adam"],
        "the stored param groups' betas and eps (Adam's settings)",
        settings_only=True,
    )


def megatron_optimizer(
    paths: layout.CheckpointPaths, reader: CheckpointReader
) -> RecordedOptimizer:
    """The optimizer Megatron's record of the run names (`adam` when it names none)."""
    try:
        settings, record = _optimizer_settings(paths, reader)
    except (CheckpointFormatError, CheckpointFileError) as err:
        return RecordedOptimizer(None, f"which optimizer is not known: {err}")
    name = settings.get("optimizer", DEFAULT_OPTIMIZER)
    if record is None:
        about = f"no record names the optimizer: Megatron's default {DEFAULT_OPTIMIZER}"
    elif "optimizer" not in settings:
        about = f"{record} names no optimizer: Megatron's default {DEFAULT_OPTIMIZER}"
    else:
        about = f"optimizer {cut_to(repr(name), 40)} in {record}"
    states = _STATES.get(name) if isinstance(name, str) else None
    if states is None:
        return RecordedOptimizer(
            None, f"{about}, whose states are not known here", muon=name in _MUON
        )
    if name == "sgd":
        momentum = settings.get("sgd_momentum", DEFAULT_SGD_MOMENTUM)
        if not isinstance(momentum, (int, float)) or isinstance(momentum, bool):
            return RecordedOptimizer(
                None, f"{about} with sgd_momentum {cut_to(repr(momentum), 40)}"
            )
        if momentum == 0:
            return RecordedOptimizer(None, f"{about} without momentum", keeps_state=False)
    return RecordedOptimizer(states, about)


def _optimizer_settings(
    paths: layout.CheckpointPaths, reader: CheckpointReader
) -> tuple[dict[str, Any], str | None]:
    """The record's optimizer settings and which record holds them (None: there is none).
    Raises CheckpointFormatError / CheckpointFileError for a record that cannot be read."""
    if paths.run_config is not None:
        section = run_config_data(paths.run_config, paths.root).get("optimizer")
        record = f"{layout.BRIDGE_RUN_CONFIG_FILE}'s optimizer section"
        return (section, record) if isinstance(section, dict) else ({}, None)
    if ARGS_KEY not in reader.objects:
        return {}, None
    fields = read_args(reader)
    return (fields, ARGS_KEY) if fields is not None else ({}, None)
