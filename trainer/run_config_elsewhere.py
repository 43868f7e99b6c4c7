"""A run's own config.yaml given as --config where that run no longer is.

`--config RUN/config.yaml` is how a run is continued (the line mfsdp prints as a run stops
names it). The file records `trainer.run_dir` as it was given; once RUN has been moved or
copied (to resume on another machine, at another rank count), that names another directory:
where the old path was gone, a fresh run started there from step 0; where it was a copy's
original, the copy's resume continued the original's newest step and saved into it; exit 0
both, the steps beside the config never read.

Refused (exit 2) before anything starts, in one line naming both directories and the
`trainer.run_dir=` override that picks one. Training in the config's own directory instead
was not chosen: the record's relative paths (data files, model) were read from where that
run started, which the move changed too, and of a copy and its original, which one a run
continues is the user's to say. A `trainer.run_dir` given on the command line is that
choice, and is not questioned. A relative `trainer.run_dir` that names another directory
is read from another current directory than the run's: nothing moved, and the run's other
relative paths would be read from there too, so the refusal says to run it from the
directory it was started in.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from mfsdp_ckpt.format import layout, run_steps
from trainer.config import RESOLVED_CONFIG_FILE, ConfigError, overrides_set


def refuse_config_of_another_run_dir(
    cls: type, config_path: str | None, overrides: Sequence[str], run_dir: str
) -> None:
    """ConfigError when `config_path` is a run's config.yaml, beside steps or a tracker
    (`_run_held`), whose `trainer.run_dir` (`run_dir`, not set by `overrides`) is another
    directory than the one it lies in."""
    if config_path is None or Path(config_path).name != RESOLVED_CONFIG_FILE:
        return
    if overrides_set(cls, overrides, "trainer.run_dir"):
        return
    beside = os.path.dirname(config_path) or "."
    if os.path.realpath(beside) == os.path.realpath(run_dir or "."):
        return
    held = _run_held(beside)
    if held is None:
        return
    said = f"{config_path}: the config of the run in {beside} ({held}), but it records"
    if not os.path.isabs(run_dir or "."):
        raise ConfigError(
            f"{said} the relative trainer.run_dir={run_dir or '.'}, and the run's relative"
            f" paths are read from the current directory ({os.getcwd()}): run it from the"
            " directory it was started in"
        )
    raise ConfigError(
        f"{said} trainer.run_dir={run_dir}, another directory (the run was moved or copied"
        f" since); pass trainer.run_dir={beside} to continue the run beside it, or"
        f" trainer.run_dir={run_dir} to train in the recorded one"
    )


def _run_held(run_dir: str) -> str | None:
    """What makes `run_dir` a run's: its newest complete step, else its tracker file; None
    for neither (a config kept beside nothing trains nothing there)."""
    try:
        steps = run_steps.list_complete_steps(run_dir)
    except OSError:
        steps = []
    if steps:
        return f"steps up to {layout.step_dir(Path(run_dir), steps[-1]).name}"
    if os.path.lexists(os.path.join(run_dir, layout.TRACKER_FILE)):
        return f"its {layout.TRACKER_FILE}"
    return None
