"""What Hydra makes of a verl command line's overrides as a whole, before any is read as an
mfsdp key: they apply in order, so a later `~key` (delete) or `key=null` undoes what the
earlier ones set under that key; and verl's config is a struct, so a key its files do not
have is refused unless added with `+`. A module of its own: these are Hydra's rules for
the overrides together, apart from what each key means (`trainer.verl_rules`).
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any

from trainer import verl_defaults, verl_keys
from trainer.verl_hydra_files import (
    MODULE_CONFIGS,
    TRAINER_DEFAULTS,
    selected_group,
    selects_megatron,
)
from trainer.verl_megatron_optim import MEGATRON_ENGINE_ONLY, OPTIMIZER_OVERRIDES
from trainer.verl_rules import ACTOR, ignored_note, normalise


def in_order(
    command: str, pairs: list[tuple[str, Any]]
) -> tuple[list[tuple[str, Any]], list[str], list[str]]:
    """`pairs` (the command's overrides, in order) as Hydra leaves them, with "key: why" for
    each deleted key carried here and notes for the others. `~key` (or `~key=value`)
    deletes the key and everything under it set before it: verl then builds its config
    class with that field's default, which is not known here, so a key mfsdp carries is
    not carried over (it was dropped without a word, or kept at the value deleted), unless
    a later override sets that key again (`~k` then `+k=v`: verl trains with v). A later
    `key=null` replaces what was set at or under the key before it, as Hydra's last value
    wins (a later `key={...}` is merged into it by Hydra, as the rules read it)."""
    kept: list[tuple[str, Any]] = []
    deleted: dict[str, str] = {}  # name -> why, until a later override sets it again
    notes: list[str] = []
    for key, value in pairs:
        name = key.lstrip("+~")
        if key.startswith("~") or value is None:
            kept = [pair for pair in kept if not _under(pair[0], name)]
        if not key.startswith("~"):
            kept.append((key, value))
            deleted.pop(name, None)
        elif verl_keys.ignored_at_any_value(command, name):
            notes.append(f"{key}: Hydra deletes it from verl's config; ignored here at any value")
        else:
            deleted[name] = (
                f"{key}: Hydra deletes {name} from verl's config, so verl trains with its config"
                " class's default for it (or fails where no class has one), which is not known"
                " here: write the value that run uses in this config, or drop the deletion"
            )
    dropped = list(deleted.values())
    return kept, dropped, notes


def _under(key: str, name: str) -> bool:
    """Whether the override `key` sets `name` or a key under it."""
    plain = key.lstrip("+")
    return plain == name or plain.startswith(name + ".")


# The keys of verl's optimizer files (verl/trainer/config/optim/fsdp.yaml and megatron.yaml
# at 1dda039, each holding every key of its earlier versions): the keys Hydra's struct takes
# in the optimizer section a run's config builds from that file
_FSDP_OPTIM = frozenset(
    {
        *("_target_", "optimizer", "optimizer_impl", "lr", "lr_warmup_steps_ratio"),
        *("total_training_steps", "weight_decay", "lr_warmup_steps", "betas", "clip_grad"),
        *("min_lr_ratio", "num_cycles", "lr_scheduler_type", "zero_indexed_step"),
        *("warmup_style", "override_optimizer_config"),
    }
)
_MEGATRON_OPTIM = frozenset(
    {
        *("_target_", "lr", "lr_warmup_steps_ratio", "total_training_steps", "weight_decay"),
        *("lr_warmup_steps", "betas", "clip_grad", "optimizer", "lr_warmup_init"),
        *("lr_decay_steps", "lr_decay_style", "min_lr", "weight_decay_incr_style"),
        *("lr_wsd_decay_style", "lr_wsd_decay_steps", "use_checkpoint_opt_param_scheduler"),
        *("use_precision_aware_optimizer", "main_grads_dtype", "exp_avg_dtype"),
        *("exp_avg_sq_dtype", "use_layer_wise_distributed_optimizer"),
        *("muon_momentum", "muon_nesterov", "muon_split_qkv", "muon_scale_mode"),
        *("muon_coefficient_type", "muon_num_ns_steps", "muon_tp_mode"),
        *("muon_extra_scale_factor", "muon_scalar_optimizer", "muon_match_adamw_update_rms"),
        "override_optimizer_config",
    }
)
_OPTIM_FILES = {"fsdp": _FSDP_OPTIM, "megatron": _MEGATRON_OPTIM}
# the optimizer file of each main_ppo actor file (its `../optim@optim:` default), with the keys
# its section had in some verl version before that file (ppo_megatron_trainer.yaml's actor)
_ACTOR_OPTIM = {
    "dp_actor": ("fsdp", frozenset()),
    "megatron_actor": ("megatron", frozenset({"min_lr_ratio", "warmup_style"})),
}
# the SFT trainers' configs: the keys of their own `optim:` section over the optimizer file
# they merge in (fsdp_sft_trainer's sft_trainer.yaml, in some verl version; optim/fsdp.yaml
# since 6cf90ceb0)
_SFT_OWN_OPTIM = {
    "sft_trainer": frozenset(
        {"lr", "betas", "weight_decay", "lr_warmup_steps_ratio", "warmup_steps_ratio"}
        | {"clip_grad", "lr_scheduler"}
    ),
    "sft_trainer_engine": frozenset(),
}
# verl's legacy fsdp_sft_trainer's `data:` section: the keys of sft_trainer.yaml's, over its
# versions until 4c8101dd2 removed the trainer, which Hydra's struct takes there
_LEGACY_SFT_DATA = frozenset(
    {
        *("train_batch_size", "micro_batch_size", "micro_batch_size_per_gpu", "train_files"),
        *("val_files", "train_max_samples", "val_max_samples", "prompt_key", "response_key"),
        *("prompt_dict_keys", "response_dict_keys", "multiturn", "max_length", "truncation"),
        *("balance_dp_token", "chat_template", "custom_cls", "use_shm"),
        "apply_chat_template_kwargs",
    }
)
# Per trainer config: (the data keys its struct takes, the keys of verl's other SFT trainer
# that set an mfsdp key but that this trainer and the datasets it builds never read, even
# added with `+`). fsdp_sft_trainer forms micro-batches of micro_batch_size_per_gpu rows
# whatever `+data.use_dynamic_bsz=True` says; carried over, it turned packing on here.
_TRAINER_DATA = {
    "sft_trainer": (_LEGACY_SFT_DATA, frozenset({"use_dynamic_bsz", "max_token_len_per_gpu"})),
}
_ACTOR = ("actor", ACTOR.rstrip("."))  # main_ppo's actor file: (group, package)
# the trainer module of each trainer config, to name it
_TRAINER_MODULES = {config: module for module, config in MODULE_CONFIGS.items()}
_ENGINE = ("model_engine", "model_engine")


def optimizer_section(
    config: str | None, selected: list[tuple[str, Any]]
) -> tuple[str, str, frozenset[str]] | None:
    """(section, file, keys) of the optimizer that verl's trainer `config` builds under the
    config-group selections `selected` (`optim=megatron`, `model_engine=megatron`): the
    section its keys are given under, the optimizer file it merges in, and the keys Hydra's
    struct takes there. None where that file is not known here (a config of the user's, an
    engine of another optimizer file): nothing is refused then."""
    given = {group: option for key, option in selected if (group := selected_group(key))}
    chosen = TRAINER_DEFAULTS.get(config or "", {}) | given
    if config in _SFT_OWN_OPTIM:
        file = chosen.get(("optim", "optim"))
        keys = _OPTIM_FILES.get(file) if isinstance(file, str) else None
        return None if keys is None else ("optim", str(file), keys | _SFT_OWN_OPTIM[config])
    # main_ppo's actor file is `${model_engine}_actor` unless a selection names it
    actor = given.get(_ACTOR, f"{given[_ENGINE]}_actor" if _ENGINE in given else chosen.get(_ACTOR))
    if not isinstance(actor, str) or actor not in _ACTOR_OPTIM:
        return None
    file, earlier = _ACTOR_OPTIM[actor]
    return ACTOR + "optim", file, _OPTIM_FILES[file] | earlier


def struct_refusals(
    pairs: list[tuple[str, Any]], selected: list[tuple[str, Any]], config: str | None
) -> tuple[list[tuple[str, Any]], list[str], list[str]]:
    """`pairs` less the keys verl's struct config refuses without Hydra's `+` (verl then
    does not start: "Key '...' is not in struct"), and "key=value: why" for each: a key
    under `optim.override_optimizer_config` (null or `{}` in verl's optimizer files); a
    key of the optimizer section that the optimizer file verl's `config` merges in under
    the selections `selected` lacks (`optimizer_section`: Megatron's `optim.lr_decay_style`
    on SFT's FSDP optimizer converted at exit 0 as a cosine schedule); a key only
    Megatron's engine has (`engine.use_megatron_fsdp`) on an SFT run whose engine file is
    not Megatron's (no `engine=megatron` selection among `selected`, no Megatron trainer
    `config`): read as given, such a key was taken as proof of the Megatron backend, and
    Megatron's betas replaced the run's; and a `data.*` key the trainer's data section
    lacks (`_TRAINER_DATA`). Last, the notes on the keys added with `+` that the trainer
    never reads (`_TRAINER_DATA`), left out of `pairs` as verl trains without them."""
    megatron_engine = any(selects_megatron(key, option) for key, option in selected) or (
        config is not None and "megatron" in config
    )
    optimizer = optimizer_section(config, selected)
    data_keys, unread = _TRAINER_DATA.get(config or "", (None, frozenset()))
    kept: list[tuple[str, Any]] = []
    refused: list[str] = []
    notes: list[str] = []
    for key, value in pairs:
        name = key.lstrip("+")
        where = (
            None
            if key.startswith("+")
            else _not_in_struct(key, optimizer, megatron_engine, (config, data_keys))
        )
        if where is None and _data_name(name) in unread:
            notes.append(ignored_note(name, f"{_TRAINER_MODULES[str(config)]} does not read it"))
        elif where is None:
            kept.append((key, value))
        else:
            refused.append(
                f"{key}={value}: verl refuses it and does not start (Hydra: Key"
                f" '{key.split('.')[-1]}' is not in struct): {where}; add a key with +{key}=..."
            )
    return kept, refused, notes


# the optimizer keys every version of each of verl's optimizer files (and the legacy SFT
# trainer's own `optim:`) holds at a value other than null: `+` on one is refused by Hydra
_OPTIM_SET = frozenset({"lr", "weight_decay", "betas", "clip_grad"})


def added_over_a_value(
    pairs: list[tuple[str, Any]], selected: list[tuple[str, Any]], config: str | None
) -> str | None:
    """Why verl does not start on the first `+key=value` of `pairs` whose key verl's
    trainer `config` (under the selections `selected`) already holds at a value other than
    null, None where there is none. Hydra adds with `+` only a key that is absent or null
    (or merges a mapping or list into it), and otherwise stops: "Could not append to
    config. An item is already at '...'". Converted as an override, such a script gave a
    config at exit 0 for a run verl never starts. The keys known here to hold a value are
    verl's defaults (`verl_defaults.TRAINERS`: `trainer.total_epochs`, `rollout.n`, ...)
    and the optimizer section's `_OPTIM_SET`, less those an override before deletes (`~key`)
    or sets to null; `++key=value`, Hydra's add-or-override, is not refused."""
    module = _TRAINER_MODULES.get(str(config))
    held = {
        default.verl_key
        for default in verl_defaults.TRAINERS.get(str(module), ())
        if default.verl_key is not None and default.value is not None
    }
    optimizer = optimizer_section(config, selected)
    held |= {f"{optimizer[0]}.{name}" for name in _OPTIM_SET} if optimizer else set()
    for key, value in pairs:
        name = key.lstrip("+~")
        adds = key[:1] == "+" and len(key) - len(name) == 1  # `++` adds or overrides
        if key.startswith("~") or value is None:  # deleted or null: `+` adds it again
            held = {kept for kept in held if not (kept == name or kept.startswith(name + "."))}
        elif adds and name in held and not isinstance(value, (dict, list)):
            return (
                f"{key}: verl's config already has {name}, so Hydra refuses to add it"
                f" (\"Could not append to config. An item is already at '{name}'\") and"
                f" verl does not start; write {name}=... without +"
            )
    return None


def _data_name(key: str) -> str | None:
    """The name under `data.` of the key `key` (`multiturn` of `data.multiturn.enable`),
    None for a key of another section."""
    section, _, rest = key.partition(".")
    return rest.split(".")[0] if section == "data" and rest else None


def _not_in_struct(
    key: str,
    optimizer: tuple[str, str, frozenset[str]] | None,
    megatron_engine: bool,
    data: tuple[str | None, frozenset[str] | None],
) -> str | None:
    """Why verl's struct config has no `key` (given without `+`), or None where it has it or
    that is not known here. `data`: the trainer config and its data section's keys (None:
    not known)."""
    read_as = normalise(key)
    parts = read_as.split(".")
    if read_as.startswith(OPTIMIZER_OVERRIDES + "."):
        return f"{OPTIMIZER_OVERRIDES} holds no keys in verl's optimizer files"
    engine_only = parts[0] == "engine" and len(parts) > 1 and parts[1] in MEGATRON_ENGINE_ONLY
    if engine_only and not megatron_engine:
        return "verl's engine file here is not Megatron's (select it with engine=megatron)"
    config, data_keys = data
    name = _data_name(key)
    if data_keys is not None and name is not None and name not in data_keys:
        close = get_close_matches(name, sorted(data_keys), n=3)
        guess = f" (did you mean {', '.join(close)}?)" if close else ""
        trainer = _TRAINER_MODULES[str(config)]
        return (
            f"this run's data section is {trainer}'s (verl's {config}.yaml), which has no"
            f" {name}{guess}"
        )
    if optimizer is not None:
        section, file, keys = optimizer
        name = key.removeprefix(section + ".").split(".")[0]
        if key.startswith(section + ".") and name not in keys:
            close = get_close_matches(name, sorted(keys), n=3)
            guess = f" (did you mean {', '.join(close)}?)" if close else ""
            return (
                f"this run's {section} is built from verl's optim/{file}.yaml, which has no"
                f" {name}{guess}"
            )
    return None
