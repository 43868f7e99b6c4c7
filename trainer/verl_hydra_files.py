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

from typing import Any

# verl/trainer/config at the commit tests/fixtures/verl_scripts names: the trainers' configs
# (`hydra.main(config_path="config", config_name=...)`) and the files of each config group
VERL_CONFIGS = frozenset(
    {
        "ppo_trainer",
        "ppo_megatron_trainer",
        "_generated_ppo_trainer",
        "_generated_ppo_megatron_trainer",
        "sft_trainer",
        "sft_trainer_engine",
        "evaluation",
        "generation",
        "reward_manager",
    }
)
VERL_GROUPS: dict[str, frozenset[str]] = {
    group: frozenset(files)
    for group, files in {
        "actor": ("actor", "dp_actor", "megatron_actor"),
        "algorithm": ("rollout_correction",),
        "critic": ("critic", "dp_critic", "megatron_critic"),
        "data": ("legacy_data",),
        "engine": ("fsdp", "megatron", "veomni"),
        "model": ("hf_model",),
        "npu_profile": ("npu_profile",),
        "optim": ("fsdp", "megatron", "veomni"),
        "profiler": ("profiler",),
        "ref": ("ref", "dp_ref", "megatron_ref"),
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
# `--config-path` values naming verl's own folder: Hydra reads a relative one from the
# trainer module's folder (verl/trainer), and verl's examples write it so; None: not given
VERL_CONFIG_PATHS = (None, "config", "./config")


def is_verl_config(path: str | None, name: str | None) -> bool:
    """Whether `--config-path path --config-name name` (None: not given, the trainer's own
    default) names one of verl's own configs."""
    stem = None if name is None else name.removesuffix(".yaml").removesuffix(".yml")
    return path in VERL_CONFIG_PATHS and (stem is None or stem in VERL_CONFIGS)


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
