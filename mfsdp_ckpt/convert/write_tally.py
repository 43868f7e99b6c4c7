"""Tensors and bytes an export has written so far, for its progress bar.

The writer reports bytes as they land on disk, a window at a time
(`ShardedSafetensorsWriter.on_written`), and the export each tensor as it completes: a
bar fed per tensor stood still for minutes on one large tensor (an embedding of many
GiB), while validate --deep's moved by its 4 MiB windows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_scheduler import Progress

if TYPE_CHECKING:
    from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter


class WriteTally:
    """Calls `progress(tensors done, tensors, bytes written, total_bytes)` on each report,
    from any thread."""

    def __init__(self, progress: Progress, tensors: int, total_bytes: int) -> None:
        self.progress, self.total_tensors, self.total_bytes = progress, tensors, total_bytes
        self.tensors = self.bytes = 0
        self._lock = threading.Lock()

    def wrote(self, nbytes: int) -> None:
        """`nbytes` more of some tensor's data are on disk."""
        with self._lock:
            self.bytes += nbytes
            self.progress(self.tensors, self.total_tensors, self.bytes, self.total_bytes)

    def tensor_done(self) -> None:
        """One more tensor is written whole."""
        with self._lock:
            self.tensors += 1
            self.progress(self.tensors, self.total_tensors, self.bytes, self.total_bytes)


def report_writes(
    writer: ShardedSafetensorsWriter, progress: Progress | None, tensors: int
) -> Callable[[], None] | None:
    """Report what `writer` writes of its `tensors` to `progress` (bytes as they land);
    returns the call to make as each tensor completes, None where nothing is reported."""
    if progress is None:
        return None
    tally = WriteTally(progress, tensors, writer.total_bytes)
    writer.on_written = tally.wrote
    return tally.tensor_done
