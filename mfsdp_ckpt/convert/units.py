"""Sizes and rates in the one-line summaries of export and import, readable at any size: a
tiny model's export read "1.30 MiB in 0.4 s (0.00 GB/s)", which looks like nothing was
written. One unit system, decimal, as the progress bar above the summary counts bytes
(`505M`), as the rate beside the size is said and as --max-shard-size reads sizes: the same
504,909,824 bytes were `505M` in the bar and `481.52 MiB` next to `(271.9 MB/s)`."""

from __future__ import annotations


def human_bytes(count: int) -> str:
    """GB from 1 GB up, MB from 1 MB, kB below (decimal, as `human_rate`), so that small
    models do not read 0.00 GB."""
    if count >= 10**9:
        return f"{count / 1e9:.2f} GB"
    return f"{count / 1e6:.2f} MB" if count >= 10**6 else f"{count / 1e3:.2f} kB"


def human_rate(count: int, seconds: float) -> str:
    """Bytes per second as GB/s from 1 GB/s up, MB/s from 1 MB/s, kB/s below: a small model
    converted in seconds of start-up read "(0.0 MB/s)", as if nothing was written."""
    rate = count / seconds if seconds > 0 else 0.0
    if rate >= 1e9:
        return f"{rate / 1e9:.2f} GB/s"
    return f"{rate / 1e6:.1f} MB/s" if rate >= 1e6 else f"{rate / 1e3:.1f} kB/s"


def took(count: int, seconds: float) -> str:
    """`in 0.1 s (13.0 MB/s)`: how long `count` bytes took, and their rate."""
    return f"in {seconds:.1f} s ({human_rate(count, seconds)})"


def gb_per_s(count: int, seconds: float | None) -> float | None:
    """`count` bytes over `seconds` in GB/s for --json (0.0 for no time; None: not timed)."""
    if seconds is None:
        return None
    return count / 1e9 / seconds if seconds else 0.0
