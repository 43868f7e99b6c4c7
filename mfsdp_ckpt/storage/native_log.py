"""What tensorstore's C++ code logs on descriptor 2, kept off the user's terminal.

tensorstore logs through absl straight to descriptor 2, in glog's form
(`E1205 13:02:00.944242   19970 common-io:5] text`), and nothing in its Python API or its
environment lowers the level (tensorstore 0.1.86: `parse_tensorstore_flags` knows no
`--minloglevel`, absl reads no environment variable, TENSORSTORE_VERBOSE_LOGGING adds lines
and never removes ERROR ones). Its credential lookup logs every source it tried, at ERROR,
while a store opens and its first request runs: with no network, nine lines about a missing
`~/.aws/config` came before mfsdp's one `error:` line, pointing the user at credentials when
the host did not resolve. `captured_native_log` points descriptor 2 at a file for a block,
writes back whatever was not such a line (Python's own output, from another thread say),
and hands over the logged text for the caller to fold into an error line it explains.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator

# severity, date, time, thread, `file:line]`: the prefix absl gives every line it logs
_LOG_LINE = re.compile(rb"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]\n]*\] ?(.*)")
# descriptor 2 is one per process: two blocks at once would restore each other's
_ONE_AT_A_TIME = threading.Lock()


@contextlib.contextmanager
def captured_native_log(into: list[str]) -> Iterator[None]:
    """Within this block nothing logged in absl's form reaches descriptor 2: each such line's
    text is appended to `into` as the block ends, and every other byte written to descriptor
    2 meanwhile is written to it then. A process without a descriptor 2 runs the block as is."""
    with _ONE_AT_A_TIME, tempfile.TemporaryFile() as sink:
        _flush_stderr()
        saved = _duplicate_stderr()
        if saved is None:  # descriptor 2 closed: there is no terminal to keep lines off
            yield
            return
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            _flush_stderr()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            _write_stderr(_other_than_log(sink.read(), into))


def _other_than_log(written: bytes, into: list[str]) -> bytes:
    """`written` less its absl lines, whose text goes to `into`."""
    kept = []
    for line in written.splitlines(keepends=True):
        logged = _LOG_LINE.fullmatch(line.rstrip(b"\r\n"))
        if logged is None:
            kept.append(line)
        else:
            into.append(logged.group(1).decode(errors="replace").strip())
    return b"".join(kept)


def _duplicate_stderr() -> int | None:
    try:
        return os.dup(2)
    except OSError:
        return None


def _flush_stderr() -> None:
    """Python's buffered stderr, written out to the descriptor it was meant for."""
    if sys.stderr is not None:
        sys.stderr.flush()


def _write_stderr(data: bytes) -> None:
    if data:
        with open(2, "wb", closefd=False) as stderr:
            stderr.write(data)


__all__ = ["captured_native_log"]
