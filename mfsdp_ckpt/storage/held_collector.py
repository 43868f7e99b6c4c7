"""The cycle collector held off while a reader builds tables it keeps.

Reading a large `.metadata` builds millions of objects (its records, then the reader's
tables) and keeps them; none is part of a cycle, and what is let go (the byte-sharing
index over the tables) is freed by its reference count. Each pass the collector makes
meanwhile walks all of them and frees nothing: on a checkpoint of thousands of parameters
those passes were close to a tenth of validate's CPU time (`bench/metadata_scan.py`).
What is built while it is held is bounded by the reader's own limits (restricted_pickle's
budget, the expansion limits), not by collection.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_held() -> Iterator[None]:
    """No cycle collection inside the block; the collector is on again after it if it was
    on before (a caller that turned it off keeps it off)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
