"""The configs a verl run leaves beside it, read by `mfsdp config from-verl` as the YAML
they hold: wandb's run config (`wandb/run-*/files/config.yaml`: each top-level section
wrapped as `{value: ...}`, with wandb's own `_wandb` and `wandb_version`) is the config
verl logged, unwrapped; Hydra's `.hydra/overrides.yaml` (a list of the run's `key=value`
overrides, not a config) is refused naming what to convert instead. Read as verl configs,
the first listed every key "not carried over" under a `value.` section and wrote verl's
defaults for the run's own settings; the second was "top level must be a mapping".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.verl_source import VerlSourceError

# wandb's own entries of a run config, beside the sections it logged
_WANDB_OWN = ("_wandb", "wandb_version")


def as_verl_config(tree: Any, source: Path) -> Any:
    """`tree` (a YAML file's top level) as the verl config it holds: a wandb run config
    unwrapped, anything else as it is; VerlSourceError for Hydra's overrides list."""
    if isinstance(tree, list) and all(isinstance(item, str) for item in tree):
        raise VerlSourceError(
            f"{source}: a list of Hydra overrides (a run's .hydra/overrides.yaml), not a"
            " config: convert the run's launch script, or the config it composed, the"
            " .hydra/config.yaml beside it"
        )
    if not _is_wandb_config(tree):
        return tree
    return {key: entry["value"] for key, entry in tree.items() if key not in _WANDB_OWN}


def _is_wandb_config(tree: Any) -> bool:
    """Whether `tree` is wandb's run config: wandb's `_wandb` entry, and every other entry
    but `wandb_version` a mapping of `value` (and `desc`)."""
    if not isinstance(tree, dict) or "_wandb" not in tree:
        return False
    return all(
        isinstance(entry, dict) and "value" in entry and set(entry) <= {"value", "desc"}
        for key, entry in tree.items()
        if key != "wandb_version"
    )
