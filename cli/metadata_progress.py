"""Progress while a large DCP `.metadata` is read: minutes for one of millions of chunks
(bench/dcp_metadata_read.py times them), silent before.

The library reports each large read through `dcp_metadata.reporting_reads`; here it
becomes a bar on a terminal, or one line on stderr into a log, before the read starts;
then one line as the checks of its chunks begin (seconds more, silent before).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from cli.lines import say
from mfsdp_ckpt.format.dcp_metadata import reporting_reads
from trainer.progress import CallbackBar, bars_drawn


@contextlib.contextmanager
def metadata_progress(shown: bool = True) -> Iterator[None]:
    """Within this block, each large `.metadata` read shows its progress (nothing when
    not `shown`: --json)."""
    if not shown:
        yield
        return
    bars: dict[str, CallbackBar] = {}

    def report(source: str, done: int, total: int) -> None:
        if bars_drawn():
            if source not in bars:
                bars[source] = CallbackBar(True, "B", "read .metadata", True)
            bars[source].update(done, total)
            if done >= total:
                bars.pop(source).close()
        elif done == 0:
            say(f"reading {source} ({total / 2**20:,.1f} MiB) ...", err=True)

    def checking(source: str) -> None:
        say(f"checking what {source} lists ...", err=True)

    try:
        with reporting_reads(report, checking):
            yield
    finally:
        for bar in bars.values():
            bar.close()


__all__ = ["metadata_progress"]
