"""Progress while a large DCP `.metadata` is read: minutes for one of millions of chunks
(bench/dcp_metadata_read.py times them), silent before.

The library reports each large read through `dcp_metadata.reporting_reads`; here it
becomes a bar on a terminal, or one line on stderr into a log, before the read starts;
then one line as the checks of what it lists begin, and each check (seconds more: schema,
tables, places, shared bytes) a bar in chunks on a terminal, else a plain line now and
then (`CallbackBar`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from cli.lines import say
from mfsdp_ckpt.format.dcp_metadata import reporting_reads
from trainer.closing import close_all
from trainer.progress import CallbackBar, bars_drawn


@contextlib.contextmanager
def metadata_progress() -> Iterator[None]:
    """Within this block, each large `.metadata` read shows its progress (on stderr, with
    --json too: stdout keeps its one object)."""
    bars: dict[str, CallbackBar] = {}
    checks: dict[tuple[str, str], CallbackBar] = {}  # (file, check) -> its bar
    read: set[str] = set()  # files read, whose checks have not yet begun

    def ended(source: str) -> None:
        """Close the bars of `source`'s checks: one refused stops short of its total."""
        for key in [key for key in checks if key[0] == source]:
            checks.pop(key).close()

    def report(source: str, done: int, total: int) -> None:
        if done == 0:
            ended(source)
        if bars_drawn():
            if source not in bars:
                bars[source] = CallbackBar(True, "B", "read .metadata", True)
            bars[source].update(done, total)
            if done >= total:
                bars.pop(source).close()
        elif done == 0:
            say(f"reading {source} ({total / 2**20:,.1f} MiB) ...", err=True)
        if done >= total:
            read.add(source)

    def checking(source: str, check: str, done: int, total: int) -> None:
        if source in read:
            read.discard(source)
            say(f"checking what {source} lists ...", err=True)
        bar = checks.get((source, check))
        if bar is None:
            ended(source)
            bar = checks[source, check] = CallbackBar(True, "chunk", f"check .metadata: {check}")
        bar.update(done, total)
        if done >= total:
            checks.pop((source, check)).close()

    try:
        with reporting_reads(report, checking):
            yield
    except BaseException as err:
        close_all([bar.close for bar in [*bars.values(), *checks.values()]], err)
        raise
    close_all([bar.close for bar in [*bars.values(), *checks.values()]], None)


__all__ = ["metadata_progress"]
