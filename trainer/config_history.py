"""What a resumed run changed of the config its run dir recorded, said once and kept.

A run writes the config it really uses into `RUN/config.yaml`. Resuming with another
`optim.lr` or `trainer.total_steps` is legitimate (a longer schedule, a lower rate), but it
happened without a word and the new config.yaml replaced the one steps 0..N were trained
with. Now the changed keys are named on stderr, and the earlier file is kept beside as
`config.until_step_N.yaml`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mfsdp_ckpt.format import layout
from mfsdp_ckpt.storage import safe_files
from trainer.config import RESOLVED_CONFIG_FILE, config_to_dict
from trainer.config_yaml import MAX_CONFIG_BYTES, parse_yaml
from trainer.run_files import replacing

# Keys that say how this command was started, not what trains: changing them changes nothing
# a checkpoint holds.
_HOW_STARTED = (
    "checkpoint.resume",
    "trainer.progress_bar",
    "trainer.stop_at_step",
    "trainer.run_dir",
)
_SHOWN_CHANGES = 6


def keep_changed_config(run_dir: Path, step: int, config: Any) -> str | None:
    """When the config step `step`'s checkpoint was trained with differs from `config` in a
    key that trains: keep it as `config.until_step_<step>.yaml` and return the note naming
    the changes (None when it is the same, missing or unreadable: nothing to keep).

    A kept `config.until_step_<step>.yaml` is that config, and is never replaced: a run
    resumed from the step with other settings and stopped before its next save left its
    own config.yaml, which trained no step that was saved; a second resume from the same
    step had overwritten the kept file with it, and compared against it."""
    kept = until_step_file(run_dir, step)
    trained_with = (
        kept if _kept_for_this_step(kept, run_dir, step) else run_dir / RESOLVED_CONFIG_FILE
    )
    earlier = _read_config(trained_with, run_dir)
    if earlier is None:
        return None
    changes = changed_keys(earlier, config_to_dict(config))
    if not changes:
        return None
    if trained_with != kept:
        # a copy, not a rename: config.yaml stays until the new one replaces it whole, so a
        # full disk meanwhile leaves it (a rename left the run dir without one)
        text = safe_files.read_text(trained_with, MAX_CONFIG_BYTES, run_dir)
        with replacing(kept, f"keep in it the config step {step} was trained with") as out:
            out.write(text.encode())
    shown = ", ".join(changes[:_SHOWN_CHANGES])
    more = f" (+{len(changes) - _SHOWN_CHANGES} more)" if len(changes) > _SHOWN_CHANGES else ""
    return (
        f"resumed with settings changed since step {step}: {shown}{more};"
        f" the config step {step} was trained with is kept as {kept}"
    )


def _kept_for_this_step(kept: Path, run_dir: Path, step: int) -> bool:
    """Whether `kept` records the config of the step-`step` checkpoint now in the run dir: it
    was kept when that checkpoint was resumed, so after it was saved. One older than the
    checkpoint is an earlier run's whose steps were removed (a user starting over in the
    same run dir): taken as this step's, it named changes against that run's settings."""
    try:
        kept_at = kept.stat().st_mtime
    except OSError:
        return False
    try:
        saved_at = (layout.step_dir(run_dir, step) / layout.MANIFEST_FILE).stat().st_mtime
    except OSError:  # a checkpoint given from elsewhere: the kept file is the run's record
        return True
    return kept_at >= saved_at


def until_step_file(run_dir: Path, step: int) -> Path:
    """Where the config the steps up to `step` were trained with is kept."""
    return run_dir / f"config.until_step_{step}.yaml"


def _read_config(path: Path, run_dir: Path) -> dict[str, Any] | None:
    """The config recorded in `path`, or None when it is missing, unreadable or no mapping."""
    try:
        recorded = parse_yaml(safe_files.read_text(path, MAX_CONFIG_BYTES, run_dir), str(path))
    except (OSError, ValueError):  # YAMLConfigError too: an alias bomb is no config
        return None
    return recorded if isinstance(recorded, dict) else None


def changed_keys(earlier: dict[str, Any], now: dict[str, Any], prefix: str = "") -> list[str]:
    """`key: old -> new` for each dotted key whose value differs (one side missing: None)."""
    changes = []
    for key in sorted(set(earlier) | set(now), key=str):
        dotted = f"{prefix}{key}"
        old, new = earlier.get(key), now.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            changes += changed_keys(old, new, f"{dotted}.")
        elif old != new and dotted not in _HOW_STARTED:
            changes.append(f"{dotted} {old!r} -> {new!r}")
    return changes
