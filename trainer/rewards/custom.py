"""Load a user's reward function from a python file (`reward.path`, `reward.name`).

This executes the file on purpose: it is the user's own code, named in the user's own config,
exactly like verl's `custom_reward_function`. Checkpoints and data files never reach here.

The user's code (its import and every call) runs with stdout sent to stderr
(`user_code_output`): its prints still show, but stdout stays the command's own (`--json`
writes one JSON object there). A `sys.exit()` in it is a failure like any exception, not the
end of the run; only Ctrl-C (KeyboardInterrupt) passes through.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from mfsdp_ckpt.check.printable import error_line
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError


class RewardError(MfsdpUsageError, ValueError):
    """A reward cannot be computed or loaded; the message names the file, function or data
    source."""


class RewardFunctionError(MfsdpFailedError, ValueError):
    """The user's reward function failed on a row: it raised, or returned something that is not
    a finite number (exit 1, the run failed). The message names the reward file, the function,
    the row's data_source (and `extra_info` index) and what went wrong."""


# How verl's reward managers call a reward function, and so how it is called here.
REWARD_KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")


def load_reward_function(path: str | Path, name: str = "compute_score") -> Callable:
    file = Path(path)
    if not os.path.lexists(file):
        raise RewardError(f"reward.path {str(file)!r}: no such file")
    try:  # a FIFO or a device: importing it would block or never end
        safe_files.regular_file(file)
    except CheckpointFileError as err:
        raise RewardError(f"reward.path {err}") from None
    spec = importlib.util.spec_from_file_location(f"mfsdp_user_reward_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise RewardError(f"reward.path {str(file)!r}: not a python file")
    module = importlib.util.module_from_spec(spec)
    try:
        with user_code_output():
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:  # sys.exit() at import would end the run, exit 0
        raise RewardError(
            f"reward.path {str(file)!r}: importing it failed: {error_line(err)}"
        ) from err
    function = getattr(module, name, None)
    if function is None:
        raise RewardError(f"reward.name {name!r}: {str(file)!r} defines no such function")
    if not callable(function):
        raise RewardError(f"reward.name {name!r} in {str(file)!r} is not callable")
    _check_signature(function, name, file)
    return function


def _check_signature(function: Callable, name: str, file: Path) -> None:
    """Refuse, before the run loads a model, a function that cannot be called the way verl
    calls it: `name(data_source=, solution_str=, ground_truth=, extra_info=)` by keyword
    (`def compute_score(*args)` takes no keywords, `(data_source, solution_str, ground_truth)`
    no extra_info)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without one: its first call says what is wrong
        return
    try:
        signature.bind(**dict.fromkeys(REWARD_KEYWORDS))
    except TypeError as err:
        raise RewardError(
            f"reward.name {name!r} in {str(file)!r} cannot be called as "
            f"{name}({', '.join(f'{key}=...' for key in REWARD_KEYWORDS)}) (verl's reward "
            f"signature): {err}"
        ) from None


@contextlib.contextmanager
def user_code_output() -> Iterator[None]:
    """Run the user's reward code with its prints on stderr: stdout is the command's own (one
    JSON object under `--json`)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield
