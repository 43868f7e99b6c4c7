"""`mfsdp -v` / `-vv`: show the library's own log lines (INFO: what each checkpoint save and
load cost; DEBUG: more), in this process and in the ranks it launches.

Only mfsdp's loggers are turned up, not the root logger, so third-party libraries stay quiet.
The level travels to torchrun's ranks in the environment, as they do not pass through `mfsdp`.
"""

from __future__ import annotations

import logging
import os
import sys

LEVEL_VARIABLE = "MFSDP_LOG_LEVEL"
OUR_LOGGERS = ("mfsdp", "mfsdp_ckpt", "trainer", "cli")


def set_verbosity(count: int) -> None:
    """0: warnings only (the default); 1: INFO; 2 or more: DEBUG."""
    if count > 0:
        os.environ[LEVEL_VARIABLE] = "DEBUG" if count > 1 else "INFO"
    configure_logging()


def configure_logging() -> None:
    """Apply the level from the environment (set by `-v` here or in the launching process)."""
    level = os.environ.get(LEVEL_VARIABLE)
    if level not in ("INFO", "DEBUG"):
        return
    rank = os.environ.get("RANK")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"[%(name)s{' rank ' + rank if rank is not None else ''}] %(message)s")
    )
    for name in OUR_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        if not logger.handlers:
            logger.addHandler(handler)
