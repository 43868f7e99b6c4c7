"""What a resumed run changed of the config its step was trained with, said once and kept.

A run writes the config it really uses into `RUN/config.yaml`. Resuming with another
`optim.lr` or `trainer.total_steps` is legitimate (a longer schedule, a lower rate), but it
happened without a word and the new config.yaml replaced the one steps 0..N were trained
with. Now the changed keys are named on stderr, and the earlier file is kept beside as
`config.until_step_N.yaml`.

The config compared against is the record of the run dir that holds the resumed step (a
step holds no config of its own): a step of another run (`checkpoint.resume=base/
global_step_4` into a new run dir) was compared with the new run dir's config.yaml, which
did not exist, and lr 3e-3 -> 1 passed without a word. A record that is missing or cannot
be read is one line saying the settings were not compared and why (it was silently
skipped), and a damaged `RUN/config.yaml`, which the run then replaces, is kept aside first.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.layout import CheckpointPaths
from mfsdp_ckpt.storage import safe_files
from trainer.config import RESOLVED_CONFIG_FILE, config_to_dict
from trainer.config_yaml import MAX_CONFIG_BYTES, parse_yaml
from trainer.run_files import RunFileError, replacing

# Keys that say how this command was started, not what trains: changing them changes nothing
# a checkpoint holds.
_HOW_STARTED = (
    "checkpoint.resume",
    "trainer.progress_bar",
    "trainer.stop_at_step",
    "trainer.run_dir",
)
_SHOWN_CHANGES = 6


class ConfigRecordError(MfsdpFailedError):
    """The record of the config a step was trained with is missing or is no config; the
    message names the file and what is wrong with it (said as a note: the run goes on)."""


def keep_changed_config(
    run_dir: Path, step: int, config: Any, resumed: CheckpointPaths | None = None
) -> str | None:
    """When the config step `step`'s checkpoint was trained with differs from `config` in a
    key that trains: keep it as `config.until_step_<step>.yaml` in `run_dir` and return the
    note naming the changes (None when it is the same: nothing to keep). When no readable
    record of it is found, the note says the settings were not compared and why.

    `resumed` is the checkpoint loaded; its run dir holds the record (`_trained_with`). None:
    the step is `run_dir`'s own.

    A kept `config.until_step_<step>.yaml` is that config, and is never replaced: a run
    resumed from the step with other settings and stopped before its next save left its
    own config.yaml, which trained no step that was saved; a second resume from the same
    step had overwritten the kept file with it, and compared against it."""
    trained_in = run_dir
    if resumed is not None:
        if resumed.run_dir is None:  # a bare dist_ckpt dir given as checkpoint.resume
            why = f"{resumed.dist_ckpt} is in no run dir, whose config.yaml records them"
            return _not_compared(step, why)
        trained_in = resumed.run_dir
    record = _trained_with(trained_in, step)
    kept = until_step_file(run_dir, step)
    try:
        earlier = _read_config(record, trained_in)
    except ConfigRecordError as err:
        return _not_compared(step, f"{err}{_set_aside(record, run_dir, kept)}")
    changes = changed_keys(earlier, config_to_dict(config))
    if not changes:
        return None
    if not _same_path(record, kept):
        # a copy, not a rename: config.yaml stays until the new one replaces it whole, so a
        # full disk meanwhile leaves it (a rename left the run dir without one)
        text = safe_files.read_text(record, MAX_CONFIG_BYTES, trained_in)
        with replacing(kept, f"keep in it the config step {step} was trained with") as out:
            out.write(text.encode())
    shown = ", ".join(changes[:_SHOWN_CHANGES])
    more = f" (+{len(changes) - _SHOWN_CHANGES} more)" if len(changes) > _SHOWN_CHANGES else ""
    source = "" if _same_path(trained_in, run_dir) else f" (trained with {record})"
    return (
        f"resumed with settings changed since step {step}{source}: {shown}{more};"
        f" the config step {step} was trained with is kept as {kept}"
    )


def _trained_with(run_dir: Path, step: int) -> Path:
    """The file in `run_dir` that records the config its step `step` was trained with: the
    config kept when that step was resumed with other settings, else config.yaml."""
    kept = until_step_file(run_dir, step)
    return kept if _kept_for_this_step(kept, run_dir, step) else run_dir / RESOLVED_CONFIG_FILE


def _not_compared(step: int, why: str) -> str:
    """The note of a resume whose settings could not be compared, and `why`."""
    return f"settings not compared with those step {step} was trained with: {why}"


def _set_aside(record: Path, run_dir: Path, kept: Path) -> str:
    """Move a damaged `run_dir/config.yaml` to `kept` when it is the record: this run
    replaces config.yaml with its own, and a file the user may mend must not vanish. What
    is said about it; nothing is moved from another run dir, which this run never writes."""
    if not _same_path(record, run_dir / RESOLVED_CONFIG_FILE) or not _regular(record):
        return ""
    try:
        os.replace(record, kept)
        os.utime(kept)  # kept now: `_kept_for_this_step` takes it as this step's record
    except OSError as err:
        raise RunFileError(
            f"{record}: cannot keep it aside as {kept} ({err.strerror or err}) before this run"
            " writes its own config.yaml; it is left as it was"
        ) from None
    return f"; its bytes are kept as {kept}"


def _regular(path: Path) -> bool:
    return os.path.isfile(path) and not os.path.islink(path)


def _same_path(one: Path, other: Path) -> bool:
    """Whether two names reach the same place (a run dir given through a link included)."""
    return os.path.realpath(one) == os.path.realpath(other)


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
    except OSError:  # the step is gone from the run dir: the kept file is the run's record
        return True
    return kept_at >= saved_at


def until_step_file(run_dir: Path, step: int) -> Path:
    """Where the config the steps up to `step` were trained with is kept."""
    return run_dir / f"config.until_step_{step}.yaml"


def _read_config(path: Path, run_dir: Path) -> dict[str, Any]:
    """The config recorded in `path`, read inside `run_dir` within the bounds of a config
    file; ConfigRecordError naming it when it is missing, unreadable or no mapping."""
    if not os.path.lexists(path):
        raise ConfigRecordError(f"{path}: missing")
    try:
        recorded = parse_yaml(safe_files.read_text(path, MAX_CONFIG_BYTES, run_dir), str(path))
    except OSError as err:  # CheckpointFileError names the file already
        raise ConfigRecordError(str(err) if str(path) in str(err) else f"{path}: {err}") from None
    except ValueError as err:  # YAMLConfigError too (it names the file): an alias bomb
        raise ConfigRecordError(str(err)) from None
    if not isinstance(recorded, dict):
        raise ConfigRecordError(f"{path}: not a mapping of config keys")
    return recorded


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
