"""Tensors and bytes an export has written so far, for its progress bar.

The writer reports bytes as they land on disk, a window at a time
(`ShardedSafetensorsWriter.on_written`), and the export each tensor as it completes: a
bar fed per tensor stood still for minutes on one large tensor (an embedding of many
GiB), while validate --deep's moved by its 4 MiB windows. Each window is also where a
task sees that the run is stopping (`StopFlag`), whether or not progress is reported.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_scheduler import Progress, StopFlag

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
    writer: ShardedSafetensorsWriter,
    progress: Progress | None,
    tensors: int,
    stop: StopFlag | None = None,
) -> Callable[[], None] | None:
    """Report what `writer` writes of its `tensors` to `progress` (bytes as they land), and
    where the writing runs in worker threads (`run_tasks`), stop the one writing after the
    window that lands once `stop` is set (TaskStopped); returns the call to make as each
    tensor completes, None where nothing is reported."""
    tally = None if progress is None else WriteTally(progress, tensors, writer.total_bytes)
    if tally is None and stop is None:
        return None

    def wrote(nbytes: int) -> None:
        if tally is not None:
            tally.wrote(nbytes)
        if stop is not None:
            stop.check()

    writer.on_written = wrote
    return None if tally is None else tally.tensor_done
