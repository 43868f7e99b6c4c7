"""The YAML files Hydra merges into a verl run's config before its keys are read (a script's
`--config-path`/`--config-name`, a YAML's `defaults:` list), told apart: verl's own or the
user's.

verl's own files (its trainers' configs and the files of their config groups, in
verl/trainer/config) hold verl's defaults: a conversion takes mfsdp's default for every key
the run does not set, as it does for a script that names no config file, so nothing of the
run is left out. A file of the user's holds settings of the run that the script or YAML
being converted does not show: `mfsdp config from-verl` says so and exits 1 (it said "they
are not in this config" and exited 0, where its help promises 1).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

# verl/trainer/config at the commits tests/fixtures/verl_scripts and verl_configs name
# (b178a3cd, and 1dda039 with its model_engine, reward, distillation and transfer_queue
# groups and torchtitan, veomni and automodel engines): the trainers' configs
# (`hydra.main(config_path="config", config_name=...)`) and the files of each config group
VERL_CONFIGS = frozenset(
    {
        "ppo_trainer",
        "ppo_megatron_trainer",
        "_generated_ppo_trainer",
        "_generated_ppo_megatron_trainer",
        "_generated_ppo_torchtitan_trainer",
        "_generated_ppo_veomni_trainer",
        "legacy_reward_impl",
        "sft_trainer",
        "sft_trainer_engine",
        "evaluation",
        "generation",
        "reward_manager",
    }
)
_ENGINES = ("dp", "megatron", "torchtitan", "veomni")  # model_engine's files, each role's prefix
VERL_GROUPS: dict[str, frozenset[str]] = {
    group: frozenset(files)
    for group, files in {
        "actor": ("actor", *(f"{engine}_actor" for engine in _ENGINES)),
        "algorithm": ("rollout_correction",),
        "critic": ("critic", *(f"{engine}_critic" for engine in _ENGINES)),
        "data": ("legacy_data",),
        "distillation": ("distillation",),
        "engine": ("fsdp", "megatron", "veomni", "torchtitan", "automodel"),
        "model": ("hf_model",),
        "model_engine": _ENGINES,
        "npu_profile": ("npu_profile",),
        "optim": ("fsdp", "megatron", "veomni", "torchtitan", "automodel"),
        "profiler": ("profiler",),
        "ref": ("ref", *(f"{engine}_ref" for engine in _ENGINES)),
        "reward": ("reward",),
        "transfer_queue": ("transfer_queue",),
        "reward_model": (
            "reward_model",
            "dp_reward_loop",
            "dp_reward_model",
            "megatron_reward_loop",
            "megatron_reward_model",
        ),
        "rollout": ("rollout",),
    }.items()
}
# The config-group files that put verl's model on its Megatron backend when a script selects
# them (`model_engine=megatron`, SFT's `engine=megatron`, `optim=megatron`): verl's
# Megatron optimizer then takes Adam's betas from Megatron, never from `optim.betas`
_MEGATRON_FILES = {
    "model_engine": "megatron",
    "engine": "megatron",
    "optim": "megatron",
    "actor": "megatron_actor",
}
# Each trainer config's `defaults:` list, as (group, package) -> the file it selects: what a
# command-line selection (`optim=fsdp`, `actor@actor_rollout_ref.actor=dp_actor`) changes
_PPO_DEFAULTS = {
    ("data", "data"): "legacy_data",
    ("rollout", "actor_rollout_ref.rollout"): "rollout",
    ("model", "actor_rollout_ref.model"): "hf_model",
    ("model", "critic.model"): "hf_model",
    ("algorithm", "algorithm.rollout_correction"): "rollout_correction",
    ("reward", "reward"): "reward",
    ("distillation", "distillation"): "distillation",
    ("transfer_queue", "transfer_queue"): "transfer_queue",
}
TRAINER_DEFAULTS: dict[str, dict[tuple[str, str], str]] = {
    "ppo_trainer": {
        **_PPO_DEFAULTS,
        ("model_engine", "model_engine"): "dp",
        ("actor", "actor_rollout_ref.actor"): "dp_actor",
        ("ref", "actor_rollout_ref.ref"): "dp_ref",
        ("critic", "critic"): "dp_critic",
        ("reward_model", "reward_model"): "dp_reward_loop",
    },
    "ppo_megatron_trainer": {
        **_PPO_DEFAULTS,
        ("model_engine", "model_engine"): "megatron",
        ("actor", "actor_rollout_ref.actor"): "megatron_actor",
        ("ref", "actor_rollout_ref.ref"): "megatron_ref",
        ("critic", "critic"): "megatron_critic",
        ("reward_model", "reward_model"): "megatron_reward_loop",
    },
    "sft_trainer": {("optim", "optim"): "fsdp"},
    "sft_trainer_engine": {
        ("model", "model"): "hf_model",
        ("engine", "engine"): "fsdp",
        ("optim", "optim"): "fsdp",
        ("profiler", "profiler"): "profiler",
    },
}
# verl's trainer module -> the config it loads (`hydra.main(config_name=...)`)
MODULE_CONFIGS = {
    "verl.trainer.main_ppo": "ppo_trainer",
    "verl.trainer.fsdp_sft_trainer": "sft_trainer",
    "verl.trainer.sft_trainer": "sft_trainer_engine",
}
# `--config-path` values naming verl's own folder: Hydra reads a relative one from the
# trainer module's folder (verl/trainer), and verl's examples write it so; None: not given
VERL_CONFIG_PATHS = (None, "config", "./config")


def is_verl_config(path: str | None, name: str | None) -> bool:
    """Whether `--config-path path --config-name name` (None: not given, the trainer's own
    default) names one of verl's own configs."""
    stem = _stem(name)
    return path in VERL_CONFIG_PATHS and (stem is None or stem in VERL_CONFIGS)


def loaded_config(module: str, path: str | None, name: str | None) -> str | None:
    """The trainer config verl's `module` loads under `--config-path path --config-name
    name` (None: not given): the module's own, a config of verl's named, or None for one of
    the user's."""
    if not is_verl_config(path, name):
        return None
    return _stem(name) or MODULE_CONFIGS.get(module)


def _stem(name: str | None) -> str | None:
    return None if name is None else name.removesuffix(".yaml").removesuffix(".yml")


def is_verl_default(entry: Any) -> bool:
    """Whether one entry of a `defaults:` list names verl's own file: `_self_`, a trainer's
    config (`ppo_trainer`, `reward_manager@reward_manager`), or a group's file (`optim: fsdp`,
    `actor@actor_rollout_ref.actor: dp_actor`)."""
    if isinstance(entry, str):
        return entry == "_self_" or _group(entry) in VERL_CONFIGS
    if isinstance(entry, dict) and len(entry) == 1:
        ((group, option),) = entry.items()
        return isinstance(group, str) and option in VERL_GROUPS.get(_group(group), ())
    return False


def shown_entry(entry: Any) -> str:
    """A `defaults:` entry as the YAML writes it (`optim: fsdp`)."""
    if isinstance(entry, dict) and len(entry) == 1:
        ((group, option),) = entry.items()
        return f"{group}: {option}"
    return str(entry)


def _group(name: str) -> str:
    """The config group (or file) an entry names: `override /optim@optim` is `optim`."""
    return name.removeprefix("override ").strip().lstrip("/").split("@")[0]


def selected_group(key: str) -> tuple[str, str] | None:
    """The (group, package) whose file a command-line `key=option` selects, as Hydra reads
    it (`optim`, `actor@actor_rollout_ref.actor`, `+optim`), or None for a config key: a
    key is a selection when it names one of verl's config groups (a folder of
    verl/trainer/config) before any `@`."""
    group, _at, package = key.lstrip("+").partition("@")
    if group not in VERL_GROUPS:
        return None
    return group, package or group


def selection_hint(key: str, option: Any) -> str | None:
    """What a top-level `key=option` given to `mfsdp train` is when it is one of verl's
    config-group selections (`engine=megatron`, `optim=fsdp`): it selects a file of verl's
    config, which `mfsdp train` does not read; the loader's own line said only "unknown
    config key 'engine'" or "expects a section", which sent a verl user looking for a key."""
    group = selected_group(key)
    if group is None or "." in key.partition("@")[0] or not isinstance(option, str):
        return None
    if option not in VERL_GROUPS[group[0]]:
        return None
    return f"{key}={option} selects a file of verl's config {_NOT_READ}"


def refused_selection(key: str, option: Any, sections: Collection[str]) -> str | None:
    """The one line for the command-line override `key=option` where it is one of verl's
    config-group selections (`selection_hint`), in a config whose top-level names are
    `sections`: read before the loader splits the key on its dots, since
    `actor@actor_rollout_ref.actor=megatron_actor` split was the unknown section
    `actor@actor_rollout_ref` ("did you mean actor?", mfsdp's GRPO section), and `+engine`
    lost its `+`. A group of a section's name (`optim=fsdp`) is that section's value; one
    of no such name is an unknown key too."""
    hint = selection_hint(key, option)
    if hint is None:
        return None
    group = key.lstrip("+").partition("@")[0]
    return hint if group in sections else f"unknown config key '{key}': {hint}"


def deletion_hint(key: str) -> str | None:
    """What Hydra's `~key` (delete) is where `key` is one of verl's config groups (`~engine`,
    `~actor@actor_rollout_ref.actor`): it removes a file of verl's config, which `mfsdp
    train` does not read; None for another key."""
    group = selected_group(key)
    if group is None or "." in key.partition("@")[0]:
        return None
    return f"~{key} removes a file of verl's config {_NOT_READ}"


# what a selection of a verl config group's file is to `mfsdp train`
_NOT_READ = (
    "(a Hydra config group), which mfsdp train does not read: `mfsdp config from-verl"
    " SCRIPT_OR_YAML` converts a verl run (docs/verl.md)"
)


def selects_megatron(key: str, option: Any) -> bool:
    """Whether the command-line selection `key=option` (`model_engine=megatron`) puts the
    run on verl's Megatron backend; False for a config key."""
    group = selected_group(key)
    return group is not None and _MEGATRON_FILES.get(group[0]) == option


# The selections that together put verl's SFT trainer on its Megatron backend, read as that
# choice only: every default of verl's optim/megatron.yaml and engine/megatron.yaml at
# 1dda039 trains as the defaults this conversion writes for verl's FSDP files do (lr 1e-3,
# weight decay 0.01, clip 1.0, constant schedule without warmup, min_lr 0, bf16; Adam's
# betas are Megatron's 0.9/0.999, as verl_megatron_optim reads them; its recompute
# settings change memory, not the updates), and its use_megatron_fsdp=False shards as
# Megatron's data parallel does, the same updates. One without the other mixes an engine
# with another backend's optimizer section.
_BACKEND_CHOICES = {
    "sft_trainer_engine": {("optim", "megatron"), ("engine", "megatron")},
}
BACKEND_CHOICE = (
    "verl's Megatron backend, whose defaults train as the values here do;"
    " strategy.name picks how the model is sharded here"
)


def is_backend_choice(
    key: str, option: Any, config: str | None, selections: list[tuple[str, Any]]
) -> bool:
    """Whether the selection `key=option`, among the command's `selections`, under verl's
    trainer config `config` only puts the run on verl's Megatron backend, made with the
    other selections it takes (`_BACKEND_CHOICES`): a note, not a setting left out."""
    choice = _BACKEND_CHOICES.get(config or "", set())
    made = {_file_selected(name, value) for name, value in selections}
    return _file_selected(key, option) in choice and choice <= made


def _file_selected(key: str, option: Any) -> tuple[str, Any] | None:
    """(group, option) for a selection of a group's file at its own package (`optim=megatron`),
    None for another (`actor@actor_rollout_ref.actor=...`) or a config key."""
    group = selected_group(key)
    return (group[0], option) if group is not None and group[0] == group[1] else None


def unlike_verl_selection(key: str, option: Any, config: str | None) -> str | None:
    """Why the selection `key=option` makes verl's run other than verl's defaults make it,
    or None where `config` (the trainer config the command loads) already selects that
    file: a selection of the same file changes nothing; another file sets keys under other
    defaults (megatron's optimizer, a critic) that this conversion would not see."""
    group, package = selected_group(key) or ("", "")
    chosen = TRAINER_DEFAULTS.get(config or "", {}).get((group, package))
    if chosen is not None and chosen == option:  # `optim=null` selects nothing verl chose
        return None
    if config not in TRAINER_DEFAULTS:
        return (
            f"selects verl's {group} file {option} over the defaults of a config that is not"
            " verl's; convert with that config's settings in the source"
        )
    if chosen is None:
        return f"verl's {config} config selects no {group} file at {package}; Hydra refuses it"
    return (
        f"selects verl's {group} file {option} where verl's {config} config selects"
        f" {chosen}; this conversion carries over verl's defaults, not that file's"
    )
