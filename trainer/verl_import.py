"""A verl run (its launch script or its YAML config) as an mfsdp config, for `mfsdp config
from-verl`: what carries over, under which mfsdp key, and what does not and why.

The key table is `trainer.verl_rules`; this module only finds the `key=value` pairs (in a
YAML config; a shell script's are read by `trainer.verl_script`) and reports.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.printable import first_of, printable
from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from trainer import (
    shell_command_targets,
    shell_unexpanded,
    verl_defaults,
    verl_hydra_files,
    verl_hydra_order,
    verl_interpolation,
    verl_keys,
    verl_launch_flags,
    verl_megatron_optim,
    verl_rules,
    verl_saved_configs,
    verl_truncation,
)
from trainer.config_base import RUN_NAMES
from trainer.config_kind import likely_kind
from trainer.config_yaml import ExpansionBudget, dump_yaml
from trainer.torchrun_options import Torchrun
from trainer.verl_off_keys import MEGATRON_LORA_SECTIONS
from trainer.verl_script import script_pairs
from trainer.verl_script_state import GRPO_MODULES
from trainer.verl_shared_keys import SHARED_WITH_VERL as _SHARED_WITH_VERL
from trainer.verl_source import (
    MAX_EXPANDED_CHARS,
    MAX_SOURCE_BYTES,
    VerlSourceError,
    config_class,
    parse_verl_yaml,
    path_keys,
    verl_defaults_words,
    yaml_shown,
)

_SHOWN_KEYS = 4  # keys a note names before "(+N more)"
# keys of mfsdp's name that verl's trainers for the command never read: said ignored, never
# carried over as the mfsdp key they spell (verl's SFT `data.micro_batch_size` set mfsdp's
# micro-batch size, which data.loss_normalization=micro_batch weighs by, where verl's
# micro-batches are micro_batch_size_per_gpu rows)
_UNREAD_BY_VERL = {
    "sft": {
        "data.micro_batch_size": (
            "verl's SFT trainers form their micro-batches of data.micro_batch_size_per_gpu"
            " rows and have not read this deprecated global count since verl f2a76acd9"
            " (2025-01)"
        ),
    },
    "grpo": {},
}


class VerlMemoryError(MfsdpFailedError):
    """Converting the file ran out of memory (exit 1); names the file."""


@contextlib.contextmanager
def _memory_named(source: str | Path) -> Iterator[None]:
    """An allocation failing inside the block (a process under `ulimit -v`) is one line
    naming `source`, not a bare MemoryError that says neither which file nor why."""
    try:
        yield
    except MemoryError:
        raise VerlMemoryError(
            f"{source}: out of memory converting it; free memory or raise the process's limit"
            " (ulimit -v)"
        ) from None


@dataclass
class Conversion:
    command: str  # sft | grpo
    tree: dict[str, Any]  # the mfsdp config (nested sections)
    notes: list[str] = field(default_factory=list)  # how verl keys were carried over
    dropped: list[str] = field(default_factory=list)  # "key=value: why not" for keys not carried
    # what the config still needs from the user before training, each named in a note: a
    # value holding shell syntax (`run_dir: $2`), a config file of the user's Hydra merges
    incomplete: list[str] = field(default_factory=list)
    # the `mfsdp train` flags that start as many processes as the verl run
    # (`verl_launch_flags`): on the command line the YAML's first comment gives
    flags: list[str] = field(default_factory=list)

    def to_yaml(self, source: str) -> str:
        """The config as YAML under comment lines of notes, the first the command that trains
        it. The notes quote the source's values: escaped (`printable`), as a newline in one
        would end its comment and write the rest as keys of the config. The config is written
        as `mfsdp train` reads it back (`dump_yaml`: `model.overrides` text `'1e5'` stays
        text)."""
        command = " ".join(["mfsdp", "train", self.command, "--config", "THIS_FILE", *self.flags])
        comments = [f"{command}   (converted from {source})"]
        comments += self.notes + [f"NOT carried over: {item}" for item in self.dropped]
        with _memory_named(source):
            lines = [f"# {printable(comment)}" for comment in comments]
            body = dump_yaml(self.tree) if self.tree else "{}\n"
            return "\n".join(lines) + "\n" + body


def convert_verl(path: str | Path, command: str | None = None) -> Conversion:
    """Read a verl launch script or YAML config at `path` as an mfsdp config for `command`
    (sft | grpo; None: from the script's module or the YAML's sections)."""
    with _memory_named(path):
        return _convert_source(Path(path), command)


def _convert_source(source: Path, command: str | None) -> Conversion:
    raw = _read_source(source)
    if len(raw) > MAX_SOURCE_BYTES:
        raise VerlSourceError(
            f"{source}: larger than {MAX_SOURCE_BYTES // 1024} KiB; not a launch script or config"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise VerlSourceError(f"{source}: not UTF-8 text") from None
    tree: dict[str, Any] = {}
    script_notes: list[str] = []
    incomplete: list[str] = []  # config files of the user's, merged in by Hydra
    to_check: list[str] = []  # keys whose variables the script sets in blocks
    module = None  # verl's trainer module; a YAML does not name it
    backend: list[tuple[str, Any]] = []  # what the files Hydra merges in say of the backend
    refused: list[str] = []  # the script's config-group selections not carried over
    torchrun = None  # torchrun's options, where torchrun starts the script's verl command
    if source.suffix.lower() in (".yaml", ".yml"):
        tree, defaults = _yaml_tree(text, source)
        if not defaults:  # a Hydra `defaults:` list is verl's
            _refuse_mfsdp_config(tree, source)
        command = command or likely_kind(tree)  # as `mfsdp train` tells them apart
        script_notes, incomplete = _defaults_notes(defaults, command)
        backend = _backend_of(defaults)
        script_notes += _interpolation_notes(tree, source)
        tree, pairs = verl_keys.split_foreign(config_class(command), tree)
    else:
        pairs, module, script_notes, incomplete, refused, to_check, config, selected, torchrun = (
            script_pairs(text, source)
        )
        command = command or ("grpo" if module in GRPO_MODULES else "sft")
        # the overrides as Hydra leaves them: in order, and only the keys its struct takes
        added = verl_hydra_order.added_over_a_value(pairs, selected, config)
        if added is not None:
            raise VerlSourceError(f"{source}: {added}")
        pairs, deleted, order_notes = verl_hydra_order.in_order(command, pairs)
        pairs, struct, unread = verl_hydra_order.struct_refusals(pairs, selected, config)
        refused += deleted + struct
        script_notes += order_notes + unread
        # the selections say the backend as the config's files do (`model_engine=megatron`)
        backend = _backend_of([config]) + selected
    tree, pairs, unread = _unread_by_verl(command, tree, pairs)
    script_notes += unread
    # a config file of the user's that verl merges in may set any key: verl's defaults are
    # written only where the whole run is in the source
    conversion = _convert(tree, pairs, command, str(source), module, not incomplete, backend)
    launch = _launch_flags(command, pairs, torchrun)
    conversion.flags = launch.flags
    # right under the command it explains, in place of the key table's notes it says better
    kept = [note for note in conversion.notes if note not in launch.replaced]
    conversion.notes = launch.notes + kept
    conversion.notes += script_notes
    conversion.dropped += refused
    # a key ignored at any value changes nothing here, whatever the script sets it to
    to_check = [
        item
        for item in to_check
        if not verl_keys.ignored_at_any_value(command, item.partition("=")[0])
        and item.partition("=")[0].lstrip("+") not in _UNREAD_BY_VERL[command]
    ]
    conversion.incomplete = list(dict.fromkeys(incomplete + to_check + conversion.incomplete))
    return conversion


def _unread_by_verl(
    command: str, tree: dict[str, Any], pairs: list[tuple[str, Any]]
) -> tuple[dict[str, Any], list[tuple[str, Any]], list[str]]:
    """`tree` and `pairs` less the keys verl's trainers never read (`_UNREAD_BY_VERL`, `+`
    or not), with a note for each key left out."""
    unread = _UNREAD_BY_VERL[command]
    kept = [(key, value) for key, value in pairs if key.lstrip("+") not in unread]
    found = [key.lstrip("+") for key, _value in pairs if key.lstrip("+") in unread]
    for name in unread:
        *sections, leaf = name.split(".")
        values: Any = tree
        for section in sections:
            values = values.get(section) if isinstance(values, dict) else None
        if isinstance(values, dict) and leaf in values:
            del values[leaf]
            found.append(name)
    notes = [verl_rules.ignored_note(name, unread[name]) for name in dict.fromkeys(found)]
    return tree, kept, notes


def _launch_flags(
    command: str, pairs: list[tuple[str, Any]], torchrun: Torchrun | None
) -> verl_launch_flags.LaunchFlags:
    """The `mfsdp train` flags for the processes the verl run started: a GRPO run's from
    trainer.n_gpus_per_node and trainer.nnodes, which place verl's Ray workers however it
    is started; else from the torchrun command that starts it (verl's SFT trainers)."""
    placed = verl_launch_flags.ray_flags(pairs) if command == "grpo" else None
    if placed is not None:
        return placed
    if torchrun is not None:
        return verl_launch_flags.torchrun_flags(torchrun)
    return verl_launch_flags.LaunchFlags()


def _read_source(source: Path) -> bytes:
    """The file's first MAX_SOURCE_BYTES + 1 bytes. Only a regular file is read: a FIFO
    (`<(...)`, a named pipe nobody writes to) blocked the command forever, and a device
    never ends; the descriptor is opened without blocking and checked again."""
    try:
        fd = safe_files.open_regular(source)
    except CheckpointFileError as err:
        raise VerlSourceError(str(err)) from None
    with os.fdopen(fd, "rb") as handle:
        try:
            return handle.read(MAX_SOURCE_BYTES + 1)
        except OSError as err:
            raise VerlSourceError(f"{source}: cannot read ({err.strerror})") from None


def _yaml_tree(text: str, source: Path) -> tuple[dict[str, Any], list[Any]]:
    """The YAML's keys, and its Hydra `defaults:` list (the files merged into it: not keys)."""
    tree = verl_saved_configs.as_verl_config(
        parse_verl_yaml(text, str(source), ExpansionBudget()), source
    )
    if not isinstance(tree, dict):
        raise VerlSourceError(f"{source}: top level must be a mapping of sections")
    defaults = tree.pop("defaults", None)
    return tree, defaults if isinstance(defaults, list) else []


def _refuse_mfsdp_config(tree: dict[str, Any], source: Path) -> None:
    """Refuse a YAML that is an mfsdp config: every key in it is one an mfsdp trainer takes
    as it is, and one at least is not verl's too (`strategy`, `checkpoint`,
    `trainer.run_dir`, ...), or it sets nothing. Converted, it was taken as a verl run that
    sets almost nothing: verl's defaults were written over mfsdp's (trainer.seed 0 became 1)
    at exit 0. A file of keys verl and mfsdp share only (`data.train_files`,
    `algorithm.adv_estimator`, ...) is a verl override file, and converts: refused, it went
    to `mfsdp train` with mfsdp's defaults (rollout.n 5, the KL loss on) for the keys it
    leaves to verl's. A file with verl keys and mfsdp keys both converts, its mfsdp keys kept
    as written."""
    keys = [key for key, _value in _leaves(tree)]
    if not keys:
        raise VerlSourceError(f"{source}: sets nothing; not a verl config")
    own: dict[str, str] = {}  # command: a key of its that verl has not
    for command in ("sft", "grpo"):
        cls = config_class(command)
        if all(verl_keys.is_native(cls, key) for key in keys):
            own_keys = [key for key in keys if key not in _SHARED_WITH_VERL[command]]
            if own_keys:
                own[command] = own_keys[0]
    if own:
        commands = "|".join(own)
        raise VerlSourceError(
            f"{source}: an mfsdp config (every key in it is mfsdp's, and"
            f" {next(iter(own.values()))} is not verl's), not one to convert: give it to"
            f" {mfsdp_command(f'train {commands} --config', Path(source))}"
        )


def _defaults_notes(defaults: list[Any], command: str) -> tuple[list[str], list[str]]:
    """Notes on the files a YAML's `defaults:` list merges into it, and the entries naming
    files of the user's, whose settings this conversion has not (`verl_hydra_files`)."""
    verl = [entry for entry in defaults if verl_hydra_files.is_verl_default(entry)]
    own = [verl_hydra_files.shown_entry(entry) for entry in defaults if entry not in verl]
    shown = [verl_hydra_files.shown_entry(entry) for entry in verl if entry != "_self_"]
    notes = []
    if shown:  # verl's defaults are written only where no file of the user's is merged in
        notes.append(f"defaults: {', '.join(shown)}: {verl_defaults_words(command, not own)}")
    if own:
        notes.append(
            f"defaults: {', '.join(own)}: Hydra merges those files of yours into this one"
            " first; their settings are not in this config: convert them with"
            f" {mfsdp_command('config from-verl FILE.yaml')} and merge the two"
        )
    return notes, [f"defaults: {entry}" for entry in own]


# verl's trainer configs and config-group files that train the actor on its Megatron backend
_MEGATRON_FILES = frozenset(
    {"ppo_megatron_trainer", "_generated_ppo_megatron_trainer", "megatron_actor", "megatron"}
)


def _backend_of(defaults: list[Any]) -> list[tuple[str, Any]]:
    """The actor's strategy that the files Hydra merges in select (a YAML's `defaults:`
    list; the trainer config a script loads, `--config-name=ppo_megatron_trainer`), as a
    key of the run for the rules that read the backend (`verl_megatron_optim.on_megatron`): verl's
    Megatron files set `strategy: megatron`, which the YAML or script then leaves out."""
    files = [
        option
        for entry in defaults
        for option in (entry.values() if isinstance(entry, dict) else [entry])
    ]
    if any(isinstance(name, str) and name.lstrip("/") in _MEGATRON_FILES for name in files):
        return [(verl_rules.ACTOR + "strategy", "megatron")]
    return []


def _interpolation_notes(tree: dict[str, Any], source: Path) -> list[str]:
    """Fill in the `${a.b}` references between the YAML's keys, as verl's OmegaConf does; a
    note names the keys filled in."""
    try:
        filled = verl_interpolation.resolve(tree, MAX_EXPANDED_CHARS)
    except verl_interpolation.InterpolationTooLarge as err:
        raise VerlSourceError(f"{source}: {err}") from None
    if not filled:
        return []
    return [
        f"{first_of(filled, _SHOWN_KEYS)}: ${{...}} references to other keys of this file filled"
        " in, as verl's OmegaConf does"
    ]


def _convert(
    tree: dict[str, Any],
    pairs: list[tuple[str, Any]],
    command: str,
    source: str,
    module: str | None = None,
    whole: bool = True,
    backend: list[tuple[str, Any]] | None = None,
) -> Conversion:
    """`tree` (keys already mfsdp's) plus `pairs` carried over one by one, so one key that
    cannot be carried is reported without stopping the rest, plus, where the source is the
    `whole` run, verl's defaults for the keys it leaves out where mfsdp's differ
    (`_verl_defaults`); the result is checked whole. `backend`: keys the run has from the
    files Hydra merges in (`_backend_of`), read by the rules but not carried over; the
    run's own keys win over them."""
    from trainer.config import set_dotted

    cls = config_class(command)
    conversion = Conversion(command, tree)
    collected = _Collect()
    log = logging.getLogger("mfsdp.config")
    log.addHandler(collected)
    propagate, log.propagate = log.propagate, False
    # once: per group it was quadratic; the source's mfsdp keys are the run's too
    given = verl_keys.keys_given([*_leaves(tree), *(backend or []), *pairs])
    carried: dict[str, str] = {}  # each mfsdp key a verl key set: that key as the source says
    notes_of: dict[str, list[str]] = {}  # what was noted of each group (`shown`) carried over
    nulled: dict[str, str] = {}  # each mfsdp key a verl key set to null from a value: that key
    try:
        for group in verl_keys.groups(pairs):
            shown = ", ".join(f"{key}={value}" for key, value in group)
            before = len(collected.messages)
            try:
                adopted = verl_keys.carry_over(cls, group, given)
                said_here = collected.messages[before:]
                notes_of[shown] = [message.removeprefix("note: ") for message in said_here]
            except verl_rules.NotCarried as err:
                conversion.dropped.append(f"{shown}: {err.reason}")
                continue
            for key, value in adopted:
                if value is None and all(written is not None for _, written in group):
                    nulled[key] = shown  # verl's 0 on val_max_samples: every row, null here
                if verl_keys.is_native(cls, key):
                    set_dotted(conversion.tree, key, value)
                    carried[key] = shown
                else:
                    conversion.dropped.append(f"{key}={value}: no such key here")
        for key, value in verl_megatron_optim.megatron_adam_unset(cls, (backend or []) + pairs):
            set_dotted(conversion.tree, key, value)
    finally:
        log.removeHandler(collected)
        log.propagate = propagate
    # a note said alike for several keys (a mapping's fields given one by one) is one note
    said = [message.removeprefix("note: ") for message in collected.messages]
    conversion.notes = list(dict.fromkeys(said))
    if command == "sft":
        conversion.notes += verl_truncation.no_padding_truncation(conversion.tree, given, module)
    conversion.dropped += _drop_misplaced_wholes(cls, conversion.tree)
    if whole:
        conversion.dropped += _unset_estimator(cls, conversion.tree, pairs)
        conversion.dropped += _unset_unmapped(cls, pairs, (backend or []) + pairs)
        conversion.notes += _verl_defaults(cls, conversion.tree, pairs, module)
        conversion.notes += _unset_decay(cls, conversion.tree, pairs, given)
    conversion.notes += _steps_within_epochs(conversion.tree, module)
    conversion.dropped += _text_as_verl_uses_it(cls, conversion.tree, source)
    conversion.dropped += _drop_unresolved_typed(cls, conversion.tree, source)
    conversion.notes += [_null_note(key, nulled) for key in _drop_nulls(conversion.tree)]
    built = _built(cls, conversion, source, carried, notes_of)
    conversion.tree = _typed(conversion.tree, built)  # 1e-6 as a number, 0 as 0.0 where floats go
    paths = path_keys(cls)
    for key, value in _leaves(conversion.tree):
        # written as it is, which training refuses in a path
        if shell_unexpanded.UNEXPANDED.search(str(value)):
            conversion.notes.append(f"{key}={value}: {_unresolved(str(value), key in paths)}")
            conversion.incomplete.append(f"{key}={value}")
    return conversion


def _built(
    cls: type,
    conversion: Conversion,
    source: str,
    carried: dict[str, str],
    notes_of: dict[str, list[str]],
) -> dict[str, Any]:
    """The converted config built as `mfsdp train` loads it. A value the loader refuses
    that a verl key set (`carried`: verl's `clip_ratio_low=10`, `rollout.top_k=0` before 0
    was read as off) is a key not carried over (exit 1), listed with the loader's reason,
    whatever else the run holds: it stopped the conversion (exit 2, as if the source were
    no verl script) only where no other key was listed, so one value's exit code turned on
    unrelated keys. Any other refusal (an mfsdp key of the source, values refused only
    together) is an error (exit 2). What was noted of carrying a listed value over
    (`notes_of` its group: "verl's optim.lr is optim.lr=inf here") is taken back, so the
    comments tell one story of each key."""
    from trainer.config import ConfigError, config_from_tree, config_to_dict

    try:
        return config_to_dict(config_from_tree(cls, conversion.tree, source))
    except ConfigError as err:
        refused = _drop_refused(cls, conversion.tree, source, set(carried))
        if not refused:
            raise VerlSourceError(str(err)) from None
    conversion.dropped += [f"{carried[key]}: {why}" for key, _value, why in refused]
    refused_groups = {carried[key] for key, _value, _why in refused}
    kept = {
        note for group, said in notes_of.items() if group not in refused_groups for note in said
    }
    withdrawn = {note for group in refused_groups for note in notes_of.get(group, [])} - kept
    conversion.notes = [note for note in conversion.notes if note not in withdrawn]
    try:
        return config_to_dict(config_from_tree(cls, conversion.tree, source))
    except ConfigError as err:
        raise VerlSourceError(str(err)) from None


# why a mapping or list given to a key of one value is not carried over
_NOT_WHOLE = (
    "a mapping or list given to a key that takes one value, which verl fails on building its"
    " config: write the value"
)


def _given_keys(cls: type, tree: dict[str, Any], pairs: list[tuple[str, Any]]) -> set[str | None]:
    """The mfsdp keys the source sets, in `tree` or by a verl key of `pairs` (carried over
    or not)."""
    return {verl_keys.target_of(cls, key) for key, _value in pairs} | {
        key for key, _value in _leaves(tree)
    }


def _unset_estimator(cls: type, tree: dict[str, Any], pairs: list[tuple[str, Any]]) -> list[str]:
    """A GRPO conversion of a run that sets no advantage estimator, as not carried over:
    verl's default (gae) trains PPO with a critic, which no mfsdp run is, so converting it
    to GRPO would train something else without a word (as `algorithm.adv_estimator=gae`
    given is refused)."""
    if verl_keys.command_of(cls) != "grpo" or verl_rules.ESTIMATOR in _given_keys(cls, tree, pairs):
        return []
    return [
        f"{verl_rules.ESTIMATOR}: not set, so verl trains its default, gae (PPO with a critic);"
        " mfsdp trains GRPO only: set algorithm.adv_estimator=grpo if that is the run"
    ]


_NORMALIZATION = "actor.loss_normalization"
# verl's default worker changed: which one a run without the key trained with depends on
# the verl it ran on, which the source does not say (trainer/grpo/aggregation.py)
_UNSET_WORKER = (
    f"{_NORMALIZATION}=global (mfsdp's default: verl's engine workers) as the source sets no"
    " trainer.use_legacy_worker_impl, whose default (auto) ran verl's legacy actor until verl"
    " made `disable` its default (63e8a0d16, 2026-03-26):"
    f" {_NORMALIZATION}=micro_batch weighs the loss as that actor did (each micro-batch's own"
    " mean, averaged; with seq-mean-token-sum-norm, only a verl before b8d91ef8d, 2026-02-26:"
    " from it on that actor trained global's)"
)


def _verl_defaults(
    cls: type, tree: dict[str, Any], pairs: list[tuple[str, Any]], module: str | None
) -> list[str]:
    """Write into `tree` verl's default for each key of `verl_defaults` the source does not
    set (in `tree` or by a verl key of `pairs`, carried over or not), where mfsdp's own
    differs: the run trains as verl would. One note per key written."""
    from trainer.config import config_to_dict, set_dotted

    command = verl_keys.command_of(cls)
    chosen, either = verl_defaults.verl_defaults(command, module)
    chosen += _megatron_lora_defaults(pairs)[0]
    given = _given_keys(cls, tree, pairs)
    verls = verl_keys.keys_given(pairs)  # a verl key setting more than its rule's key
    own = dict(_leaves(config_to_dict(cls())))
    notes = []
    for default in chosen:
        if default.key in given or default.verl_key in verls or own[default.key] == default.value:
            continue
        set_dotted(tree, default.key, default.value)
        notes.append(
            f"{default.key}={yaml_shown(default.value)}: verl's default {default.said()};"
            f" mfsdp's own is {yaml_shown(own[default.key])}"
        )
    if command == "grpo" and _NORMALIZATION not in given:
        notes.append(_UNSET_WORKER)
    unset = [key for key in either if key not in given]
    if unset:
        notes.append(
            f"{', '.join(unset)}: not set, and verl's defaults for them differ between its"
            " SFT trainers (fsdp_sft_trainer, sft_trainer), which this YAML does not name:"
            " mfsdp's stand (docs/verl.md lists both)"
        )
    return notes


def _unset_decay(
    cls: type, tree: dict[str, Any], pairs: list[tuple[str, Any]], run: dict[str, Any]
) -> list[str]:
    """A note on the weight decay of a run that leaves it to verl's default: the same value
    here (verl_defaults.FSDP_WEIGHT_DECAY), which verl's FSDP backend applies to every
    parameter and mfsdp to weight matrices only; a weight decay given has its note from
    the key's reading (`verl_keys.carry_over`). `run`: the run's keys, for its backend."""
    from trainer.config import config_to_dict

    if verl_rules.WEIGHT_DECAY in _given_keys(cls, tree, pairs):
        return []
    if verl_megatron_optim.on_megatron(run):
        return []
    here = dict(_leaves(config_to_dict(cls())))[verl_rules.WEIGHT_DECAY]
    if here != verl_defaults.FSDP_WEIGHT_DECAY:  # mfsdp's default stands for another value
        return []
    return [
        f"{verl_rules.WEIGHT_DECAY}={yaml_shown(here)}: verl's default too, which the source does"
        f" not set, {verl_rules.DECAY_SCOPE}"
    ]


def _megatron_lora_defaults(
    pairs: list[tuple[str, Any]],
) -> tuple[list[verl_defaults.Default], list[verl_defaults.Unmapped]]:
    """verl's Megatron LoRA defaults for each section of it the run (`pairs`) turns on."""
    given = verl_keys.keys_given(pairs)
    chosen: list[verl_defaults.Default] = []
    unmapped: list[verl_defaults.Unmapped] = []
    for section in MEGATRON_LORA_SECTIONS:
        if verl_keys.megatron_lora_on(section, given):
            defaults, unset = verl_defaults.megatron_lora(section)
            chosen += defaults
            unmapped += unset
    return chosen, unmapped


def _unset_unmapped(
    cls: type, pairs: list[tuple[str, Any]], context: list[tuple[str, Any]]
) -> list[str]:
    """verl's defaults for keys no mfsdp key holds (`verl_defaults.Unmapped`) that the source
    does not set, each read by its key's rule as if given (`context`: the run's keys): one
    refused is not carried over, as it is given, with what to set in verl to train as here.
    Left out, Megatron's fused LoRA converted at exit 0 as if it were mfsdp's."""
    given = verl_keys.keys_given(pairs)
    run = verl_keys.keys_given(context)
    dropped = []
    for default in _megatron_lora_defaults(pairs)[1]:
        if default.verl_key in given:
            continue
        why = verl_keys.refusal(cls, [(default.verl_key, default.value)], run)
        if why is not None:
            dropped.append(
                f"{default.verl_key}: not set, so verl trains its default,"
                f" {yaml_shown(default.value)}: {why}; set"
                f" {default.verl_key}={yaml_shown(default.here)} in verl for the same training"
            )
    return dropped


# verl's legacy SFT trainer, whose LR schedule spans its epochs, not total_training_steps
_EPOCH_SCHEDULED = "verl.trainer.fsdp_sft_trainer"


def _steps_within_epochs(tree: dict[str, Any], module: str | None) -> list[str]:
    """A run that sets trainer.total_steps (verl's trainer.total_training_steps) also ends
    after trainer.epochs epochs, when that comes first: verl's fit loops (ray_trainer's and
    both SFT trainers') run `for epoch in range(total_epochs)` and stop at
    total_training_steps only inside it, where mfsdp's `trainer.total_steps` alone goes round
    the data as often as it takes (a converted run trained more steps than verl's). One note,
    and one more for verl's legacy `fsdp_sft_trainer` (`module`), whose learning-rate
    warmup and decay span steps per epoch x total_epochs where mfsdp's span
    trainer.total_steps: every step's rate differed, and only docs/verl.md said so."""
    from trainer.config import set_dotted

    trainer = tree.get("trainer") or {}
    if trainer.get("total_steps") is None:
        return []
    set_dotted(tree, "trainer.steps_within_epochs", True)
    epochs = trainer.get("epochs", "1, mfsdp's default,")
    notes = [
        f"trainer.steps_within_epochs=true: as in verl, the run ends after trainer.epochs={epochs}"
        " epochs when that comes before trainer.total_steps"
    ]
    if module == _EPOCH_SCHEDULED:
        notes.append(
            f"trainer.total_steps={trainer['total_steps']}: the learning-rate schedule (warmup,"
            f" decay) differs from verl's: {module} spans it over steps per epoch x"
            " trainer.epochs and uses total_training_steps only to stop, mfsdp spans it over"
            " trainer.total_steps; for verl's schedule write trainer.stop_at_step in its place"
        )
    return notes


def _drop_unresolved_typed(cls: type, tree: dict[str, Any], source: str) -> list[str]:
    """Remove from `tree` the values still holding shell syntax (`${LEN}` from an argument,
    an environment variable, a command) where the key takes a number or a flag: one such
    failed the whole conversion; each is reported as not carried over instead."""
    unresolved = {
        key
        for key, value in _leaves(tree)
        if isinstance(value, str) and ("$" in value or "`" in value)
    }
    return [
        f"{key}={value}: known only when the script runs ({why}): set it here"
        for key, value, why in _drop_refused(cls, tree, source, unresolved)
    ]


def _drop_refused(
    cls: type, tree: dict[str, Any], source: str, keys: set[str]
) -> list[tuple[str, Any, str]]:
    """Remove from `tree` each of `keys` whose value alone the config loader refuses:
    (key, value, why) of each."""
    from trainer.config import ConfigError, config_from_tree, set_dotted

    dropped = []
    for key, value in _leaves(tree):
        if key not in keys:
            continue
        alone: dict[str, Any] = {}
        set_dotted(alone, key, value)
        try:
            config_from_tree(cls, alone, source)
        except ConfigError as err:
            _remove_dotted(tree, key)
            dropped.append((key, value, str(err).removeprefix(f"{source}: ")))
    _drop_empty(tree)
    return dropped


def _text_as_verl_uses_it(cls: type, tree: dict[str, Any], source: str) -> list[str]:
    """Each number or boolean of `tree`'s text keys as verl uses it: Hydra reads
    `trainer.project_name=42` (OmegaConf `project_name: 42`) as an integer, which verl names
    its run by as `42`, and `1.50` as `1.5`, `true` as `True`: the text written (`1.50`,
    `true`) would name another run than verl's. Where verl takes a path or a name it looks
    up (trainer.default_local_dir in os.path.join, model.path in str.startswith, a column,
    a function), it fails on a number: refused, saying so. A boolean stays one for a key of
    named values (checkpoint.resume), whose check names them.

    The empty text Hydra reads `key=` as (a variable the script leaves unset, as verl's
    templates do: `TRAIN_DATA_PATH=""`) names nothing verl can use: each such key is removed
    and reported as not carried over (it was read as null, and the mfsdp default stayed
    with a note that verl had not set it)."""
    from trainer.config import set_dotted, takes_text_only
    from trainer.config_base import TEXT_VALUES

    dropped = []
    for key, value in list(_leaves(tree)):
        if key not in RUN_NAMES and (value == "" or (isinstance(value, list) and "" in value)):
            _remove_dotted(tree, key)
            dropped.append(
                f"{key}={yaml_shown(value)}: the empty text verl gets from `KEY=` or a"
                " variable the script leaves unset, and fails on: set it here"
            )
            continue
        if not isinstance(value, (bool, int, float)) or not takes_text_only(cls, key):
            continue
        if key in RUN_NAMES:
            set_dotted(tree, key, str(value))
        elif not (isinstance(value, bool) and key in TEXT_VALUES):
            kind = "boolean" if isinstance(value, bool) else "number"
            raise VerlSourceError(
                f"{source}: config key '{key}' is the {kind} {value} as verl reads it, where"
                f" verl takes text only (a path, or a name it looks up) and fails on a {kind}:"
                ' quote the text for verl ("\'TEXT\'" on its command line, "TEXT" in a YAML)'
            )
    _drop_empty(tree)
    return dropped


def _remove_dotted(tree: dict[str, Any], key: str) -> None:
    *sections, leaf = key.split(".")
    for name in sections:
        tree = tree[name]
    del tree[leaf]


def _drop_empty(tree: dict[str, Any]) -> None:
    for key in list(tree):
        if isinstance(tree[key], dict):
            _drop_empty(tree[key])
            if not tree[key]:
                del tree[key]


def _unresolved(value: str, is_path: bool) -> str:
    """What a value still holding shell syntax needs from the user (`is_path`: its key names
    a file or directory, which alone takes a variable's value from this environment)."""
    forms = shell_unexpanded.forms(value)
    if "command" in forms:
        return "a shell command substitution, not run here: edit the value"
    if "arithmetic" in forms:
        return (
            "shell arithmetic not worked out here (a name with no value here, or an operator"
            " not read here): edit the value"
        )
    if re.search(r"\$\{?[0-9@*#]", value):  # `save_path=$2`: what the script is run with
        return "an argument the script is run with: edit the value"
    if re.search(r"\$[?$!-]", value):
        return "a shell special parameter, known only when the script runs: edit the value"
    if re.search(r"\$\{[^}:]*\.", value):  # a dotted name: OmegaConf's, never the shell's
        return (
            "an OmegaConf interpolation (a resolver, or a key not in the file), which a config"
            " does not expand: edit the value"
        )
    if is_path:
        return (
            "a shell variable with no value here (not set by the script, or set only as it"
            " runs), and a config expands none: edit the path"
        )
    names = ", ".join(
        sorted(
            {
                f"${shell_command_targets.reference_name(m)}"
                for m in shell_command_targets.REFERENCE.finditer(value)
            }
        )
    )
    return (
        f"{names or 'a shell variable'}: not taken from this environment, where only path keys"
        " take a variable's value (a config is shared, and its values reach the trackers):"
        " write the value here"
    )


def _typed(tree: dict[str, Any], built: dict[str, Any]) -> dict[str, Any]:
    """The keys of `tree` with the values the config loader made of them."""
    return {
        key: (
            _typed(value, built[key])
            if isinstance(value, dict) and isinstance(built[key], dict) and key != "overrides"
            else built[key]
        )
        for key, value in tree.items()
    }


def _leaves(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    pairs = []
    for key, value in tree.items():
        pairs += (
            _leaves(value, f"{prefix}{key}.")
            if isinstance(value, dict)
            else [(f"{prefix}{key}", value)]
        )
    return pairs


def _drop_misplaced_wholes(cls: type, tree: dict[str, Any], prefix: str = "") -> list[str]:
    """Remove from `tree` each mapping or list given to an mfsdp key that takes one value
    (`verl_keys.takes_whole`): "key=value: why" for each. Read on, `optim.lr={}` was a
    section left empty and `optim.lr={1e-6: null}` one of nulls, both dropped with mfsdp's
    default kept, at exit 0."""
    dropped = []
    for key, value in list(tree.items()):
        dotted = f"{prefix}{key}"
        if not isinstance(value, (dict, list)) or not verl_keys.is_native(cls, dotted):
            continue
        if not verl_keys.takes_whole(cls, dotted, value):
            del tree[key]
            dropped.append(f"{dotted}={value}: {_NOT_WHOLE}")
        elif isinstance(value, dict):
            dropped += _drop_misplaced_wholes(cls, value, f"{dotted}.")
    return dropped


def _null_note(key: str, nulled: dict[str, str]) -> str:
    """The note on mfsdp key `key`, null in the converted tree and so left to mfsdp's default:
    verl's own null there, or the verl value read as null (`nulled`: verl's
    `data.val_max_samples=0` is every row, as mfsdp's null is), never called null in verl."""
    if key not in nulled:
        return f"{key}: null in verl, the mfsdp default stays"
    every = " is every row:" if key in verl_rules.NO_LIMIT else " is"
    return f"{key}: verl's {nulled[key]}{every} null here, mfsdp's default"


def _drop_nulls(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """Remove null leaves (verl's "not set") and sections left empty; the dotted keys removed."""
    removed = []
    for key in list(tree):
        if isinstance(tree[key], dict) and tree[key]:
            removed += _drop_nulls(tree[key], f"{prefix}{key}.")
            if not tree[key]:
                del tree[key]
        elif tree[key] is None:
            removed.append(f"{prefix}{key}")
            del tree[key]
    return removed


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
