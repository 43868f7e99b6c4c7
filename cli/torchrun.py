"""torchrun for `mfsdp train --nproc-per-node N`, reporting the way every mfsdp command does.

Run as `python -m cli.torchrun TORCHRUN_ARGS`. Plain torchrun, when a rank fails, prints
its own traceback (ChildFailedError) and a table of failures under the rank's one-line
error, and exits 1 whatever the rank's exit code; on Ctrl-C it logs a warning per rank.
Here torchrun runs in this process instead: its agent's log lines are turned down unless
`mfsdp -v` asked for them, and it exits with the first failed rank's code (2 a usage
mistake, 1 a failed run, 130 interrupted), so the ranks' own messages are all a user sees.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

from cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from cli.verbosity import LEVEL_VARIABLE

AGENT_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.distributed.run")


def rank_exit_code(exitcode: int) -> int:
    """The code `mfsdp train` exits with for a rank that exited with `exitcode` (negative:
    killed by that signal)."""
    if exitcode in (EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED):
        return exitcode
    return EXIT_INTERRUPTED if exitcode == -signal.SIGINT else EXIT_FAILED


def _deciding_failure(failures: dict[int, Any]) -> tuple[int, Any]:
    """(rank, ProcessFailure) that says why the run stopped: a rank that exited by itself,
    rank 0 first, not one torchrun terminated once another had failed (torchrun's own "first
    failure" goes by timestamps in whole seconds, so it can pick the terminated one)."""
    exited = sorted((item for item in failures.items() if item[1].exitcode > 0), key=_rank_of)
    return exited[0] if exited else min(failures.items(), key=_rank_of)


def _rank_of(item: tuple[int, Any]) -> int:
    return item[0]


def _quiet_agent_logs() -> None:
    """torchrun's agent logs a warning per rank on Ctrl-C and an error line per failure; unless
    `mfsdp -v`, only CRITICAL gets through (its loggers set their own levels when their
    modules load, so each one present is turned down, and the parents for those to come)."""
    if os.environ.get(LEVEL_VARIABLE):
        return
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith(AGENT_LOGGERS) and isinstance(logger, logging.Logger):
            logger.setLevel(logging.CRITICAL)
    for name in AGENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    _quiet_agent_logs()
    try:
        run(parse_args(argv))
    except ChildFailedError as err:
        rank, failure = _deciding_failure(err.failures)
        code = rank_exit_code(failure.exitcode)
        said = err.failures.get(0)  # rank 0 prints usage mistakes (and leaves them here)
        if code == EXIT_USAGE and (said is None or said.message != failure.message):
            print(f"error: rank {rank}: {failure.message}", file=sys.stderr)
        return code
    except (KeyboardInterrupt, SignalException):
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
