"""`mfsdp -v` / `-vv`: show the library's own log lines (INFO: what each checkpoint save and
load cost; DEBUG: more), in this process and in the ranks it launches; and, with or without
`-v`, every log line and warning printed escaped.

Only mfsdp's loggers are turned up, not the root logger, so third-party libraries stay quiet.
The level travels to torchrun's ranks in the environment, as they do not pass through `mfsdp`.

Log lines and warnings quote values users chose: a config value (`note: verl's
trainer.resume_mode/resume_from_path is checkpoint.resume=PATH here`), a path, a key. Python
prints them raw (a logger with no handler falls back to `logging.lastResort`, a warning to
`warnings.showwarning`), and so do the handlers libraries add to their own loggers
(transformers'), so a newline in the value forged a line of its own and an ANSI escape
recoloured or retitled the terminal. Every log message and warning goes through `printable`
here, as the lines `say` prints do.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import TextIO

from mfsdp_ckpt.check.printable import printable

LEVEL_VARIABLE = "MFSDP_LOG_LEVEL"
OUR_LOGGERS = ("mfsdp", "mfsdp_ckpt", "trainer", "cli")


class _PrintableRecord(logging.LogRecord):
    """A log record whose message is printable, whichever handler formats it: libraries
    print through handlers of their own that ours never see (transformers puts one on its
    "transformers" logger, which does not propagate). A traceback a formatter appends
    stays as it is."""

    def getMessage(self) -> str:
        return printable(super().getMessage())


class _StderrLines(logging.StreamHandler):
    """Escaped lines on whatever sys.stderr is when a record comes (as `logging.lastResort`
    writes), not the stream at setup: a test or a caller may swap it in between."""

    def __init__(self, fmt: str, level: int = logging.NOTSET) -> None:
        logging.Handler.__init__(self, level)
        self.setFormatter(logging.Formatter(fmt))

    @property
    def stream(self) -> TextIO:
        return sys.stderr


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """`warnings.showwarning` with the warning as one escaped line (Python's quotes the
    message raw, then the source line)."""
    stream = file if file is not None else sys.stderr
    if stream is not None:
        shown = printable(f"{filename}:{lineno}: {category.__name__}: {message}")
        stream.write(shown + "\n")


def set_verbosity(count: int) -> None:
    """0: warnings only (the default); 1: INFO; 2 or more: DEBUG."""
    if count > 0:
        os.environ[LEVEL_VARIABLE] = "DEBUG" if count > 1 else "INFO"
    configure_logging()


def configure_logging() -> None:
    """Escape every log line and warning; apply the level from the environment (set by `-v`
    here or in the launching process)."""
    logging.setLogRecordFactory(_PrintableRecord)
    logging.lastResort = _StderrLines("%(message)s", logging.WARNING)
    warnings.showwarning = _show_warning
    level = os.environ.get(LEVEL_VARIABLE)
    if level not in ("INFO", "DEBUG"):
        return
    rank = os.environ.get("RANK")
    handler = _StderrLines(f"[%(name)s{' rank ' + rank if rank is not None else ''}] %(message)s")
    for name in OUR_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        if not logger.handlers:
            logger.addHandler(handler)
