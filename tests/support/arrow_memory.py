"""Pyarrow's memory as a test measures it: a pool that counts the most bytes held at once,
made the default while a block runs, so a bound on what a parquet check decodes can be
asserted without reading process RSS, which other tests' allocations move."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pyarrow as pa


@contextlib.contextmanager
def arrow_peak() -> Iterator[pa.MemoryPool]:
    """A pool made pyarrow's default while inside, counting the most bytes it held at once."""
    before = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(before)
    pa.set_memory_pool(pool)
    try:
        yield pool
    finally:
        pa.set_memory_pool(before)
